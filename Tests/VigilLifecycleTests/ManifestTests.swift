import Foundation
import Testing
import VigilProtocol
@testable import VigilConfig
@testable import VigilLifecycle

private let file = "/etc/vigil/apps/logger.toml"

private func parseProblem(_ text: String) -> ManifestProblem? {
    do {
        _ = try AppManifest.parse(text, file: file)
        return nil
    } catch {
        return error
    }
}

@Suite("Manifest parsing")
struct ManifestParsingTests {
    @Test func validManifestParsesEveryField() throws {
        let text = """
            id = "org.example.logger"
            exec = ["/usr/bin/sensor-logger", "--db", "/var/lib/logger.db"]
            background-modes = ["external-accessory", "bluetooth-central"]
            accessory-protocols = ["org.example.sensor", "com.acme.p2"]
            exits-on-suspend = true
            working-directory = "/var/lib/logger"
            [environment]
            LOG_LEVEL = "debug"
            MODE = "fast"
            """
        let manifest = try AppManifest.parse(text, file: file)
        #expect(manifest == AppManifest(
            id: "org.example.logger", exec: ["/usr/bin/sensor-logger", "--db", "/var/lib/logger.db"],
            backgroundModes: [.externalAccessory, .bluetoothCentral],
            accessoryProtocols: ["org.example.sensor", "com.acme.p2"], exitsOnSuspend: true,
            workingDirectory: "/var/lib/logger", environment: ["LOG_LEVEL": "debug", "MODE": "fast"], path: file))
        #expect(manifest.mayBeWoken(for: .externalAccessory))
        #expect(!manifest.mayBeWoken(for: .bluetoothPeripheral))
        #expect(manifest.mayBeWoken(for: nil))
    }

    @Test func minimalManifestTakesDefaults() throws {
        let manifest = try AppManifest.parse("id = \"org.example.min\"\nexec = [\"/bin/true\"]\n", file: file)
        #expect(manifest == AppManifest(id: "org.example.min", exec: ["/bin/true"], path: file))
        #expect(manifest.backgroundModes.isEmpty && !manifest.exitsOnSuspend && manifest.workingDirectory == nil)
    }

    @Test(arguments: [
        ("id = \"logger\"\nexec = [\"/bin/x\"]", "id"),
        ("id = \"org..example\"\nexec = [\"/bin/x\"]", "id"),
        ("id = \"org.ex ample\"\nexec = [\"/bin/x\"]", "id"),
        ("id = 42\nexec = [\"/bin/x\"]", "id"),
        ("exec = [\"/bin/x\"]", "id"),
        ("id = \"org.example.a\"", "exec"),
        ("id = \"org.example.a\"\nexec = []", "exec"),
        ("id = \"org.example.a\"\nexec = [\"\"]", "exec"),
        ("id = \"org.example.a\"\nexec = \"/bin/x\"", "exec"),
        ("id = \"org.example.a\"\nexec = [\"/bin/x\", 3]", "exec[1]"),
        ("id = \"org.example.a\"\nexec = [\"/bin/x\"]\nbackground-modes = [\"external-accessory\", \"audio\"]", "background-modes[1]"),
        ("id = \"org.example.a\"\nexec = [\"/bin/x\"]\naccessory-protocols = [\"org.example.p\", 5]", "accessory-protocols[1]"),
        ("id = \"org.example.a\"\nexec = [\"/bin/x\"]\naccessory-protocols = \"org.example.p\"", "accessory-protocols"),
        ("id = \"org.example.a\"\nexec = [\"/bin/x\"]\naccessory-protocols = [\"sensor\"]", "accessory-protocols[0]"),
        ("id = \"org.example.a\"\nexec = [\"/bin/x\"]\nbackground-mode = [\"external-accessory\"]", "background-mode"),
        ("id = \"org.example.a\"\nexec = [\"/bin/x\"]\nexits-on-suspend = \"yes\"", "exits-on-suspend"),
        ("id = \"org.example.a\"\nexec = [\"/bin/x\"]\nworking-directory = \"relative/dir\"", "working-directory"),
        ("id = \"org.example.a\"\nexec = [\"/bin/x\"]\n[environment]\nLEVEL = 3", "environment.LEVEL"),
    ])
    func invalidManifestNamesFileAndField(text: String, field: String) throws {
        let problem = try #require(parseProblem(text), "expected \(field) to be refused")
        #expect(problem.file == file)
        #expect(problem.field == field)
        #expect(problem.description.hasPrefix("\(file): field '\(field)': "))
    }

    @Test func unknownBackgroundModeListsKnownOnes() throws {
        let problem = try #require(parseProblem("id = \"org.example.a\"\nexec = [\"/bin/x\"]\nbackground-modes = [\"bluetooth-central\", \"voip\"]"))
        #expect(problem.field == "background-modes[1]")
        #expect(problem.message.contains("'voip'"))
        #expect(problem.message.contains("external-accessory"))
    }

    @Test func unknownFieldIsReportedByName() throws {
        let problem = try #require(parseProblem("id = \"org.example.a\"\nexec = [\"/bin/x\"]\nexits-on-supsend = true"))
        #expect(problem.field == "exits-on-supsend")
        #expect(problem.message.contains("unknown field"))
    }

    /// Issue 10, item 1: toml++ (TOMLKit) aborted the daemon on these.
    @Test(arguments: [
        ("[[[", "expected a key, found '[' at line 1, column 3"),
        ("[[[]]]", "expected a key, found '[' at line 1, column 3"),
        ("id = \"org.example.a\"\nexec = [\"/bin/x\"]\n[[[]]]\n", "at line 3, column 3"),
        ("id = \"org.example.a", "the string is never closed at line 1, column 6"),
        ("id = \"org.\\qexample\"", "invalid escape '\\q'"),
        ("id = \"a\"\nid = \"b\"", "'id' is defined twice at line 2, column 1"),
        ("exec = [" + String(repeating: "[", count: 500), "nested deeper than 128 levels"),
        ("id = 99999999999999999999", "does not fit in 64 bits"),
        ("id = \"org.example.a\"\u{0}", "control character U+0000"),
    ])
    func brokenTOMLIsRefusedWithItsPlace(text: String, message: String) throws {
        let problem = try #require(parseProblem(text))
        #expect(problem.file == file)
        #expect(problem.field == nil)
        #expect(problem.message.hasPrefix("not valid TOML: "), "\(problem)")
        #expect(problem.message.contains(message), "\(problem)")
    }

    @Test func invalidUTF8IsRefusedWithItsPlace() throws {
        do {
            _ = try AppManifest.parse(Array("id = \"org.example.a\"\nexec = [\"/bin/".utf8) + [0xC0, 0xAF] + Array("\"]".utf8), file: file)
            Issue.record("invalid UTF-8 accepted")
        } catch {
            #expect(error.file == file)
            #expect(error.message == "not valid TOML: not valid UTF-8 (byte 0xC0) at line 2, column 15")
        }
    }

    @Test func wrongTypesSayWhatWasFound() throws {
        let base = "id = \"org.example.a\"\nexec = [\"/bin/x\"]\n"
        for (text, field, message) in [
            (base + "exits-on-suspend = 1", "exits-on-suspend", "must be true or false, not an integer"),
            (base + "background-modes = \"external-accessory\"", "background-modes", "must be an array of strings, not a string"),
            (base + "environment = [\"A=b\"]", "environment", "must be a table, not an array"),
            ("id = {}\nexec = [\"/bin/x\"]", "id", "must be a string, not a table"),
            ("id = \"org.example.a\"\nexec = [1979-05-27]", "exec[0]", "must be a string, not a date-time"),
        ] {
            let problem = try #require(parseProblem(text))
            #expect(problem.field == field)
            #expect(problem.message == message, "\(problem)")
        }
    }

    @Test func syntaxErrorNamesTheLine() throws {
        let problem = try #require(parseProblem("id = \"org.example.a\"\nexec = [\"/bin/x\"]\nexits-on-suspend = = true\n"))
        #expect(problem.file == file)
        #expect(problem.field == nil)
        #expect(problem.message.contains("not valid TOML"))
        #expect(problem.message.contains("line 3"))
    }
}

/// A fresh temporary directory, removed by the caller.
func temporaryDirectory() throws -> String {
    let path = FileManager.default.temporaryDirectory.path + "/vigil-lifecycle-tests-" + UUID().uuidString
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

private func write(_ text: String, to path: String) throws {
    try text.write(toFile: path, atomically: true, encoding: .utf8)
}

private func manifestText(_ id: String, exec: String = "/bin/x") -> String {
    "id = \"\(id)\"\nexec = [\"\(exec)\"]\n"
}

@Suite("Manifest loading")
struct ManifestLoaderTests {
    @Test func badFilesAreReportedWhileGoodOnesLoad() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try write(manifestText("org.example.good"), to: dir + "/good.toml")
        try write("id = \"org.example.bad\"\n", to: dir + "/bad.toml")
        try write("this is [ not toml", to: dir + "/broken.toml")
        try write("not a manifest", to: dir + "/README")

        let result = ManifestLoader.load(directories: [dir])
        #expect(Array(result.manifests.keys) == ["org.example.good"])
        #expect(result.manifests["org.example.good"]?.path == dir + "/good.toml")
        #expect(result.problems.count == 2)
        let bad = try #require(result.problems.first { $0.file == dir + "/bad.toml" })
        #expect(bad.field == "exec")
        let broken = try #require(result.problems.first { $0.file == dir + "/broken.toml" })
        #expect(broken.field == nil)
        #expect(broken.message.contains("line 1"))
    }

    /// Files no parser should see: they are refused by name and the good one loads.
    @Test func unreadableAndOversizedFilesAreRefused() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try write(manifestText("org.example.good"), to: dir + "/good.toml")
        #expect(mkfifo(dir + "/fifo.toml", 0o600) == 0)  // reading it would block the daemon
        try FileManager.default.createDirectory(atPath: dir + "/folder.toml", withIntermediateDirectories: false)
        try write(manifestText("org.example.big") + "# " + String(repeating: "x", count: 2 << 20), to: dir + "/big.toml")
        try Data([0x69, 0x64, 0x20, 0x3D, 0x20, 0x22, 0xFF, 0x22]).write(to: URL(fileURLWithPath: dir + "/binary.toml"))

        let result = ManifestLoader.load(directories: [dir])
        #expect(Array(result.manifests.keys) == ["org.example.good"])
        let messages = Dictionary(uniqueKeysWithValues: result.problems.map { (($0.file as NSString).lastPathComponent, $0.message) })
        #expect(messages == [
            "fifo.toml": "cannot read: not a regular file",
            "folder.toml": "cannot read: not a regular file",
            "big.toml": "larger than 1048576 bytes: not read",
            "binary.toml": "not valid TOML: not valid UTF-8 (byte 0xFF) at line 1, column 7",
        ])
    }

    @Test func duplicateIdsInOneDirectoryAreRefused() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try write(manifestText("org.example.same", exec: "/bin/a"), to: dir + "/a.toml")
        try write(manifestText("org.example.same", exec: "/bin/b"), to: dir + "/b.toml")

        let result = ManifestLoader.load(directories: [dir])
        #expect(result.manifests.count == 1)
        #expect(result.manifests["org.example.same"]?.exec == ["/bin/a"])
        #expect(result.problems.count == 1)
        #expect(result.problems.first?.file == dir + "/b.toml")
        #expect(result.problems.first?.field == "id")
        #expect(result.problems.first?.message.contains(dir + "/a.toml") == true)
    }

    @Test func laterDirectoryOverridesEarlier() throws {
        let system = try temporaryDirectory()
        let user = try temporaryDirectory()
        defer {
            try? FileManager.default.removeItem(atPath: system)
            try? FileManager.default.removeItem(atPath: user)
        }
        try write(manifestText("org.example.app", exec: "/usr/bin/system"), to: system + "/app.toml")
        try write(manifestText("org.example.other"), to: system + "/other.toml")
        try write(manifestText("org.example.app", exec: "/home/u/bin/mine"), to: user + "/my-app.toml")

        let result = ManifestLoader.load(directories: [system, "/nonexistent/vigil/apps", user])
        #expect(result.problems.isEmpty)  // a missing directory is normal
        #expect(Set(result.manifests.keys) == ["org.example.app", "org.example.other"])
        #expect(result.manifests["org.example.app"]?.exec == ["/home/u/bin/mine"])
        #expect(result.manifests["org.example.app"]?.path == user + "/my-app.toml")
    }
}

@Suite("Manifest users and groups")
struct ManifestAccountTests {
    @Test func userGroupAndSupplementaryGroupsParseByNameOrId() throws {
        let manifest = try AppManifest.parse(
            manifestText("org.example.a") + "user = \"logger\"\ngroup = 1001\nsupplementary-groups = [\"plugdev\", 20, \"4242\"]\n",
            file: file)
        #expect(manifest.user == .name("logger"))
        #expect(manifest.group == .id(1001))
        #expect(manifest.supplementaryGroups == [.name("plugdev"), .id(20), .id(4242)])
        #expect(!manifest.rootOwned)  // only the loader says so

        let plain = try AppManifest.parse(manifestText("org.example.b"), file: file)
        #expect(plain.user == nil && plain.group == nil && plain.supplementaryGroups.isEmpty)
    }

    @Test func onlyRootWrittenOutIsLiterallyRoot() {
        #expect(AccountReference.name("root").isLiterallyRoot)
        #expect(AccountReference.id(0).isLiterallyRoot)
        #expect(!AccountReference.name("toor").isLiterallyRoot)
        #expect(!AccountReference.id(1).isLiterallyRoot)
    }

    @Test(arguments: [
        ("user = \"\"", "user", "must not be empty"),
        ("user = -1", "user", "-1 is out of range"),
        ("user = 4294967295", "user", "4294967295 is out of range"),
        ("user = \"99999999999\"", "user", "is out of range"),
        ("user = \"a:b\"", "user", "is not a user or group name"),
        ("user = \"a b\"", "user", "is not a user or group name"),
        ("user = \"../etc\"", "user", "is not a user or group name"),
        ("user = \"-x\"", "user", "is not a user or group name"),
        ("user = true", "user", "must be a name (string) or a numeric id, not a boolean"),
        ("group = 1.5", "group", "not a float"),
        ("supplementary-groups = \"plugdev\"", "supplementary-groups", "must be an array"),
        ("supplementary-groups = [\"ok\", \"\"]", "supplementary-groups[1]", "must not be empty"),
    ])
    func badAccountsNameTheField(line: String, field: String, message: String) throws {
        let problem = try #require(parseProblem(manifestText("org.example.a") + line + "\n"))
        #expect(problem.field == field)
        #expect(problem.message.contains(message), "\(problem)")
    }

    @Test func tooManySupplementaryGroupsAreRefused() throws {
        let groups = (0...AppManifest.maximumSupplementaryGroups).map { "\($0 + 100)" }.joined(separator: ", ")
        let problem = try #require(parseProblem(manifestText("org.example.a") + "supplementary-groups = [\(groups)]\n"))
        #expect(problem.field == "supplementary-groups")
    }
}

@Suite("Manifest policy")
struct ManifestPolicyTests {
    let system = ManifestPolicy(systemMode: true, trustedOwners: [0], daemonUID: 0, daemonUserName: "root")
    let perUser = ManifestPolicy(systemMode: false, trustedOwners: [0, 1000], daemonUID: 1000, daemonUserName: "alice")

    func problem(_ policy: ManifestPolicy, _ manifest: AppManifest) -> ManifestProblem? {
        do {
            try policy.validate(manifest)
            return nil
        } catch {
            return error
        }
    }

    @Test func systemDaemonRequiresUser() throws {
        let missing = try #require(problem(system, AppManifest(id: "org.example.a", exec: ["/bin/x"], path: file)))
        #expect(missing.field == "user")
        #expect(missing.message.contains("add user = \"NAME\""))
        #expect(problem(system, AppManifest(id: "org.example.a", exec: ["/bin/x"], user: .name("logger"), path: file)) == nil)
    }

    @Test func rootNeedsARootOnlyManifest() throws {
        var manifest = AppManifest(id: "org.example.a", exec: ["/bin/x"], user: .name("root"), path: file)
        let refused = try #require(problem(system, manifest))
        #expect(refused.field == "user")
        #expect(refused.message.contains("owned by root"))
        manifest.rootOwned = true
        #expect(problem(system, manifest) == nil)

        var group = AppManifest(id: "org.example.a", exec: ["/bin/x"], user: .name("logger"), group: .id(0), path: file)
        #expect(problem(system, group)?.field == "group")
        group.group = nil
        group.supplementaryGroups = [.name("plugdev"), .name("root")]
        #expect(problem(system, group)?.field == "supplementary-groups[1]")
        group.rootOwned = true
        #expect(problem(system, group) == nil)
    }

    @Test func perUserDaemonRunsAppsAsItsOwnUserOnly() throws {
        #expect(problem(perUser, AppManifest(id: "org.example.a", exec: ["/bin/x"], path: file)) == nil)
        #expect(problem(perUser, AppManifest(id: "org.example.a", exec: ["/bin/x"], user: .name("alice"), path: file)) == nil)
        #expect(problem(perUser, AppManifest(id: "org.example.a", exec: ["/bin/x"], user: .id(1000), path: file)) == nil)
        let other = try #require(problem(perUser, AppManifest(id: "org.example.a", exec: ["/bin/x"], user: .name("bob"), path: file)))
        #expect(other.field == "user")
        #expect(other.message.contains("vigild --system"))
    }
}

/// Ownership and modes of manifest folders and files (run as root or not:
/// the test's own files are owned by its user, which the policy trusts).
@Suite("Manifest files' ownership and modes")
struct ManifestFileSafetyTests {
    let policy = ManifestPolicy.perUser

    @Test func safeFolderLoadsAndOthersWritableFilesAreRefused() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        #expect(chmod(dir, 0o755) == 0)
        try write(manifestText("org.example.good"), to: dir + "/good.toml")
        try write(manifestText("org.example.open"), to: dir + "/open.toml")
        #expect(chmod(dir + "/good.toml", 0o644) == 0)
        #expect(chmod(dir + "/open.toml", 0o666) == 0)
        try write(manifestText("org.example.group"), to: dir + "/group.toml")
        #expect(chmod(dir + "/group.toml", 0o664) == 0)

        let result = ManifestLoader.load(directories: [dir], policy: policy)
        #expect(Array(result.manifests.keys) == ["org.example.good"])
        let messages = Dictionary(uniqueKeysWithValues: result.problems.map { (($0.file as NSString).lastPathComponent, $0.message) })
        #expect(messages["open.toml"]?.contains("writable by others (mode 0666)") == true, "\(messages)")
        #expect(messages["group.toml"]?.contains("writable by its group") == true, "\(messages)")
        #expect(result.manifests["org.example.good"]?.rootOwned == (geteuid() == 0))
    }

    @Test func unsafeFolderRefusesAllItsManifests() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try write(manifestText("org.example.a"), to: dir + "/a.toml")
        #expect(chmod(dir, 0o777) == 0)
        let result = ManifestLoader.load(directories: [dir], policy: policy)
        #expect(result.manifests.isEmpty)
        #expect(result.problems.count == 1)
        #expect(result.problems.first?.file == dir)
        #expect(result.problems.first?.message.contains("is writable by others (mode 0777)") == true, "\(result.problems)")
    }

    /// /tmp is root's and sticky: nobody else can replace what is in it.
    @Test func stickyRootFolderAboveIsSafeButNotAsTheManifestFolder() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try FileManager.default.createDirectory(atPath: dir + "/sticky", withIntermediateDirectories: false)
        try write(manifestText("org.example.a"), to: dir + "/sticky/a.toml")
        #expect(chmod(dir + "/sticky", 0o1777) == 0)
        let result = ManifestLoader.load(directories: [dir + "/sticky"], policy: policy)
        #expect(result.manifests.isEmpty)
        #expect(result.problems.first?.message.contains("writable by others") == true, "\(result.problems)")
    }

    @Test func untrustedOwnerIsRefused() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try write(manifestText("org.example.a"), to: dir + "/a.toml")
        let stranger = ManifestPolicy(systemMode: false, trustedOwners: [4_000_000], daemonUID: 4_000_000, daemonUserName: nil)
        let result = ManifestLoader.load(directories: [dir], policy: stranger)
        #expect(result.manifests.isEmpty)
        #expect(result.problems.first?.message.contains("is owned by uid") == true, "\(result.problems)")
    }

    @Test func privateGroupWriteIsHarmlessWhenThePolicySaysSo() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        #expect(chmod(dir, 0o775) == 0)
        try write(manifestText("org.example.a"), to: dir + "/a.toml")
        #expect(chmod(dir + "/a.toml", 0o664) == 0)
        var info = stat()
        #expect(stat(dir, &info) == 0)
        var lenient = policy
        lenient.harmlessGroups = [info.st_gid]
        #expect(ManifestLoader.load(directories: [dir], policy: lenient).manifests.keys.sorted() == ["org.example.a"])
        #expect(ManifestLoader.load(directories: [dir], policy: policy).manifests.isEmpty)
    }
}
