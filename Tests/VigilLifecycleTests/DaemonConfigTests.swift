import Foundation
import Testing
import VigilProtocol
@testable import VigilConfig
@testable import VigilLifecycle

@Suite("Daemon configuration")
struct DaemonConfigTests {
    let file = "/etc/vigil/vigild.toml"
    let defaults = DaemonConfig(system: true)

    func configProblem(_ text: String) -> ManifestProblem? {
        do {
            _ = try DaemonConfig.parse(text, file: file, defaults: defaults)
            return nil
        } catch {
            return error
        }
    }

    @Test func defaultsMatchTheBackgroundModel() {
        let timings = Timings()
        #expect(timings.suspendGrace == 5)
        #expect(timings.wakeBudget == 10)
        #expect(timings.backgroundTimeLimit == 180)
        #expect(timings.expirationWarning == 5)
        #expect(timings.exitGrace == 5)
        #expect(timings.relaunchWindow == 60)
        #expect(timings.relaunchLimit == 3)
        #expect(defaults.eventQueueLimit == 1000)
        #expect(defaults.suspension == .automatic)
        #expect(defaults.manifestDirectories == ["/usr/share/vigil/apps", "/etc/vigil/apps"])

        let user = DaemonConfig(system: false, environment: ["HOME": "/home/u"])
        // Not the system daemon's folders: its manifests name other users (docs/configuration.md).
        #expect(user.manifestDirectories == ["/usr/share/vigil/user-apps", "/etc/vigil/user-apps", "/home/u/.config/vigil/apps"])
        #expect(user.stateDirectory == "/home/u/.local/state/vigil")
        let xdg = DaemonConfig(system: false, environment: ["HOME": "/home/u", "XDG_CONFIG_HOME": "/cfg", "XDG_STATE_HOME": "/st"])
        #expect(xdg.manifestDirectories.last == "/cfg/vigil/apps")
        #expect(xdg.stateDirectory == "/st/vigil")
    }

    @Test func emptyFileKeepsDefaults() throws {
        #expect(try DaemonConfig.parse("", file: file, defaults: defaults) == defaults)
        #expect(try DaemonConfig.parse("# nothing\n", file: file, defaults: defaults) == defaults)
    }

    @Test func everyKeyIsApplied() throws {
        let text = """
            socket = "/run/v.sock"
            manifest-dirs = ["/a", "/b"]
            state-dir = "/var/lib/v"
            log-dir = "/var/log/v"
            cgroup-root = "/sys/fs/cgroup/v"
            suspension = "signal"
            event-queue-limit = 7
            decision-log-size = 9

            [timings]
            suspend-grace = 1.5
            wake-budget = 2
            background-time-limit = 30.0
            expiration-warning = 3.25
            exit-grace = 4.0
            launch-timeout = 7.5
            relaunch-window = 11.0
            relaunch-limit = 6
            """
        let config = try DaemonConfig.parse(text, file: file, defaults: defaults)
        #expect(config.socket == "/run/v.sock")
        #expect(config.manifestDirectories == ["/a", "/b"])
        #expect(config.stateDirectory == "/var/lib/v")
        #expect(config.logDirectory == "/var/log/v")
        #expect(config.cgroupRoot == "/sys/fs/cgroup/v")
        #expect(config.suspension == .signal)
        #expect(config.eventQueueLimit == 7)
        #expect(config.decisionLogSize == 9)
        #expect(config.timings.suspendGrace == 1.5)
        #expect(config.timings.wakeBudget == 2)
        #expect(config.timings.backgroundTimeLimit == 30)
        #expect(config.timings.expirationWarning == 3.25)
        #expect(config.timings.exitGrace == 4)
        #expect(config.timings.launchTimeout == 7.5)
        #expect(config.timings.relaunchWindow == 11)
        #expect(config.timings.relaunchLimit == 6)
    }

    @Test func bluetoothKeys() throws {
        #expect(defaults.bluetooth == true)
        #expect(defaults.bluetoothRequestTimeout == 20)
        let config = try DaemonConfig.parse(
            "bluetooth = false\nbluetooth-request-timeout = 2.5\nsession-buffer-limit = 4096\n", file: file, defaults: defaults)
        #expect(config.bluetooth == false)
        #expect(config.bluetoothRequestTimeout == 2.5)
        #expect(config.sessionBufferLimit == 4096)
        #expect(throws: ManifestProblem.self) { try DaemonConfig.parse("bluetooth = \"yes\"\n", file: file, defaults: defaults) }
        #expect(throws: ManifestProblem.self) { try DaemonConfig.parse("bluetooth-request-timeout = -1\n", file: file, defaults: defaults) }
    }

    @Test func appOutputKeys() throws {
        #expect(defaults.appOutput == .automatic)
        #expect(defaults.appLogSize == 8 << 20)
        let config = try DaemonConfig.parse("app-output = \"files\"\napp-log-size = 65536\n", file: file, defaults: defaults)
        #expect(config.appOutput == .files)
        #expect(config.appLogSize == 65536)
        #expect("\(configProblem("app-output = \"syslog\"\n").map { "\($0)" } ?? "")".contains("must be one of auto, journal, files"))
        #expect(configProblem("app-log-size = 100\n") != nil)
    }

    @Test func partialTimingsKeepOtherDefaults() throws {
        let config = try DaemonConfig.parse("[timings]\nwake-budget = 1\n", file: file, defaults: defaults)
        var expected = Timings()
        expected.wakeBudget = 1
        #expect(config.timings == expected)
    }

    @Test(arguments: [
        ("sokcet = \"/x\"", "sokcet"),
        ("[timings]\nsuspend-grace = 1\nwake-buget = 2", "timings.wake-buget"),
        ("suspension = \"freezer\"", "suspension"),
        ("event-queue-limit = 0", "event-queue-limit"),
        ("event-queue-limit = \"many\"", "event-queue-limit"),
        ("[timings]\nwake-budget = -1", "timings.wake-budget"),
        ("[timings]\nwake-budget = \"10 s\"", "timings.wake-budget"),
        ("[timings]\nrelaunch-limit = 1.5", "timings.relaunch-limit"),
        ("[timings]\nbackground-time-limit = 5\nexpiration-warning = 5", "timings.expiration-warning"),
        ("timings = 3", "timings"),
        ("manifest-dirs = \"/a\"", "manifest-dirs"),
    ])
    func badKeysAreRefusedByName(text: String, field: String) throws {
        do {
            _ = try DaemonConfig.parse(text, file: file, defaults: defaults)
            Issue.record("expected \(field) to be refused")
        } catch {
            #expect(error.file == file)
            #expect(error.field == field)
        }
    }

    /// Every numeric key has a range; a value outside it is refused with the
    /// key, the value and the range (issue 10, item 2: 1e300 trapped later).
    @Test(arguments: [
        ("[timings]\nsuspend-grace = 1e300", "timings.suspend-grace", "1e+300 is out of range: must be a number of seconds from 0.1 to 86400"),
        ("[timings]\nsuspend-grace = 0", "timings.suspend-grace", "0 is out of range: must be a number of seconds from 0.1 to 86400"),
        ("[timings]\nsuspend-grace = 0.05", "timings.suspend-grace", "0.05 is out of range"),
        ("[timings]\nsuspend-grace = nan", "timings.suspend-grace", "nan is out of range"),
        ("[timings]\nsuspend-grace = inf", "timings.suspend-grace", "inf is out of range"),
        ("[timings]\nwake-budget = 86401", "timings.wake-budget", "86401 is out of range: must be a number of seconds from 0.1 to 86400"),
        ("[timings]\nbackground-time-limit = 0.5", "timings.background-time-limit", "from 1 to 86400"),
        ("[timings]\nexpiration-warning = -1", "timings.expiration-warning", "-1 is out of range: must be a number of seconds from 0 to 86400"),
        ("[timings]\nexit-grace = 3601", "timings.exit-grace", "from 0.1 to 3600"),
        ("[timings]\nlaunch-timeout = 0", "timings.launch-timeout", "0 is out of range: must be a number of seconds from 0.1 to 3600"),
        ("[timings]\nrelaunch-window = 0", "timings.relaunch-window", "from 1 to 86400"),
        ("[timings]\nrelaunch-limit = 0", "timings.relaunch-limit", "0 is out of range: must be an integer from 1 to 1000"),
        ("[timings]\nrelaunch-limit = 1001", "timings.relaunch-limit", "1001 is out of range"),
        ("event-queue-limit = 9223372036854775807", "event-queue-limit",
         "9223372036854775807 is out of range: must be an integer from 1 to 1000000"),
        ("event-queue-limit = -9223372036854775808", "event-queue-limit", "-9223372036854775808 is out of range"),
        ("event-queue-limit = 0", "event-queue-limit", "0 is out of range"),
        ("decision-log-size = 100001", "decision-log-size", "must be an integer from 1 to 100000"),
        ("session-buffer-limit = 1023", "session-buffer-limit", "must be an integer from 1024 to 1073741824"),
        ("session-buffer-limit = 1073741825", "session-buffer-limit", "1073741825 is out of range"),
        ("bluetooth-request-timeout = 301", "bluetooth-request-timeout", "from 0.1 to 300"),
        ("bluetooth-request-timeout = -inf", "bluetooth-request-timeout", "-inf is out of range"),
    ])
    func numbersOutOfRangeAreRefused(text: String, field: String, message: String) throws {
        let problem = try #require(configProblem(text))
        #expect(problem.file == file)
        #expect(problem.field == field)
        #expect(problem.message.contains(message), "\(problem)")
    }

    @Test(arguments: [
        ("[timings]\nsuspend-grace = \"5 s\"", "timings.suspend-grace", "must be a number of seconds from 0.1 to 86400, not a string"),
        ("[timings]\nwake-budget = true", "timings.wake-budget", "not a boolean"),
        ("[timings]\nexit-grace = [1]", "timings.exit-grace", "not an array"),
        ("[timings]\nrelaunch-limit = 1.5", "timings.relaunch-limit", "must be an integer from 1 to 1000, not a float (1.5)"),
        ("event-queue-limit = 1e3", "event-queue-limit", "not a float (1000)"),
        ("event-queue-limit = 1979-05-27", "event-queue-limit", "not a date-time"),
        ("decision-log-size = {}", "decision-log-size", "not a table"),
        ("bluetooth = 1", "bluetooth", "must be true or false, not an integer"),
        ("socket = 1", "socket", "must be a string, not an integer"),
        ("manifest-dirs = [\"/a\", 2]", "manifest-dirs[1]", "must be a string, not an integer"),
        ("timings = \"fast\"", "timings", "must be a table, not a string"),
        ("accessory = 1", "accessory", "must be an array of tables ([[accessory]]), not an integer"),
    ])
    func wrongTypesAreRefusedByName(text: String, field: String, message: String) throws {
        let problem = try #require(configProblem(text))
        #expect(problem.field == field)
        #expect(problem.message.contains(message), "\(problem)")
    }

    @Test func anAccessoryRuleNamesTheKindOfNodeItMatches() throws {
        let config = try DaemonConfig.parse("""
            [[accessory]]
            vendor-id = "04D9"
            product-id = "a052"
            protocols = ["com.example.co2"]
            kind = "hid"
            [[accessory]]
            vendor-id = "1209"
            protocols = ["org.example.sensor"]
            """, file: file, defaults: defaults)
        #expect(config.accessoryRules.map(\.kind) == ["hid", "serial"])
        let unknown = try #require(configProblem("[[accessory]]\nvendor-id = \"1209\"\nprotocols = [\"a.b\"]\nkind = \"usb\""))
        #expect(unknown.message.contains("'usb' is not a kind of accessory (serial or hid)"), "\(unknown)")
        let settings = try #require(configProblem(
            "[[accessory]]\nvendor-id = \"1209\"\nprotocols = [\"a.b\"]\nkind = \"hid\"\nline-settings = \"9600 8N1\""))
        #expect(settings.message.contains("a HID accessory has no line settings"), "\(settings)")
    }

    @Test func rangeBoundsAreAccepted() throws {
        typealias R = DaemonConfig.Ranges
        let low = try DaemonConfig.parse("""
            event-queue-limit = \(R.eventQueueLimit.lowerBound)
            decision-log-size = \(R.decisionLogSize.lowerBound)
            session-buffer-limit = \(R.sessionBufferLimit.lowerBound)
            bluetooth-request-timeout = \(R.bluetoothRequestTimeout.lowerBound)
            [timings]
            suspend-grace = \(R.suspendGrace.lowerBound)
            wake-budget = \(R.wakeBudget.lowerBound)
            background-time-limit = \(R.backgroundTimeLimit.lowerBound)
            expiration-warning = \(R.expirationWarning.lowerBound)
            exit-grace = \(R.exitGrace.lowerBound)
            launch-timeout = \(R.launchTimeout.lowerBound)
            relaunch-window = \(R.relaunchWindow.lowerBound)
            relaunch-limit = \(R.relaunchLimit.lowerBound)
            """, file: file, defaults: defaults)
        #expect(low.timings.suspendGrace == 0.1 && low.eventQueueLimit == 1 && low.sessionBufferLimit == 1024)
        let high = try DaemonConfig.parse("""
            event-queue-limit = \(R.eventQueueLimit.upperBound)
            decision-log-size = \(R.decisionLogSize.upperBound)
            session-buffer-limit = \(R.sessionBufferLimit.upperBound)
            bluetooth-request-timeout = \(R.bluetoothRequestTimeout.upperBound)
            [timings]
            suspend-grace = \(R.suspendGrace.upperBound)
            wake-budget = \(R.wakeBudget.upperBound)
            background-time-limit = \(R.backgroundTimeLimit.upperBound)
            expiration-warning = 3600
            exit-grace = \(R.exitGrace.upperBound)
            launch-timeout = \(R.launchTimeout.upperBound)
            relaunch-window = \(R.relaunchWindow.upperBound)
            relaunch-limit = \(R.relaunchLimit.upperBound)
            """, file: file, defaults: defaults)
        #expect(high.timings.suspendGrace == 86_400 && high.eventQueueLimit == 1_000_000)
        // The longest duration the config allows still converts and adds to any clock reading.
        #expect(nanoseconds(R.suspendGrace.upperBound) == 86_400_000_000_000)
    }

    @Test func defaultsLieWithinTheirRanges() {
        typealias R = DaemonConfig.Ranges
        let t = Timings()
        #expect(R.eventQueueLimit.contains(defaults.eventQueueLimit) && R.decisionLogSize.contains(defaults.decisionLogSize))
        #expect(R.sessionBufferLimit.contains(defaults.sessionBufferLimit))
        #expect(R.bluetoothRequestTimeout.contains(defaults.bluetoothRequestTimeout))
        #expect(R.suspendGrace.contains(t.suspendGrace) && R.wakeBudget.contains(t.wakeBudget))
        #expect(R.backgroundTimeLimit.contains(t.backgroundTimeLimit) && R.expirationWarning.contains(t.expirationWarning))
        #expect(R.exitGrace.contains(t.exitGrace) && R.relaunchWindow.contains(t.relaunchWindow))
        #expect(R.relaunchLimit.contains(t.relaunchLimit) && R.launchTimeout.contains(t.launchTimeout))
    }

    /// Durations that reach the engine some other way saturate rather than trap.
    @Test func durationConversionSaturates() {
        #expect(nanoseconds(1e300) == 1 << 62)
        #expect(nanoseconds(.infinity) == 1 << 62)
        #expect(nanoseconds(.nan) == 0)
        #expect(nanoseconds(-5) == 0)
        #expect(nanoseconds(1.5) == 1_500_000_000)
        #expect(UInt64.max - (1 << 62) > nanoseconds(1e300))  // now + the longest still fits
    }

    @Test(arguments: ["[[[", "[[[]]]", "[timings\nsuspend-grace = 1", "socket = \"/x", "a = 1\na = 2"])
    func brokenTOMLIsRefusedWithItsPlace(text: String) throws {
        let problem = try #require(configProblem(text))
        #expect(problem.file == file && problem.field == nil)
        #expect(problem.message.hasPrefix("not valid TOML: "), "\(problem)")
        #expect(problem.message.contains(" at line "), "\(problem)")
    }

    @Test func invalidUTF8IsRefusedWithItsPlace() throws {
        do {
            _ = try DaemonConfig.parse(Array("socket = \"/run/".utf8) + [0xFF] + Array("\"\n".utf8), file: file, defaults: defaults)
            Issue.record("invalid UTF-8 accepted")
        } catch {
            #expect(error.message == "not valid TOML: not valid UTF-8 (byte 0xFF) at line 1, column 16")
        }
    }

    @Test func onlyRegularFilesOfBoundedSizeAreRead() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let fifo = dir + "/fifo.toml"
        #expect(mkfifo(fifo, 0o600) == 0)
        let big = dir + "/big.toml"
        try ("# " + String(repeating: "x", count: 2 << 20) + "\n").write(toFile: big, atomically: true, encoding: .utf8)
        for (path, message) in [(fifo, "cannot read: not a regular file"), (dir, "cannot read: not a regular file"),
                                (big, "larger than 1048576 bytes: not read")] {
            do {
                _ = try DaemonConfig.load(file: path, defaults: defaults, required: true)
                Issue.record("\(path) was read")
            } catch {
                #expect(error.file == path && error.message == message, "\(error)")
            }
        }
    }

    @Test func relativePathsResolveAgainstTheFilesDirectory() throws {
        let text = """
            socket = "run/v.sock"
            manifest-dirs = ["apps", "/abs/apps"]
            state-dir = "state"
            log-dir = "../logs"
            cgroup-root = "cg"
            """
        let config = try DaemonConfig.parse(text, file: "/opt/vigil/etc/vigild.toml", defaults: defaults)
        #expect(config.socket == "/opt/vigil/etc/run/v.sock")
        #expect(config.manifestDirectories == ["/opt/vigil/etc/apps", "/abs/apps"])
        #expect(config.stateDirectory == "/opt/vigil/etc/state")
        #expect(config.logDirectory == "/opt/vigil/etc/../logs")
        #expect(config.cgroupRoot == "/opt/vigil/etc/cg")
    }

    @Test func loadFromDisk() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/vigild.toml"
        #expect(try DaemonConfig.load(file: path, defaults: defaults, required: false) == defaults)
        #expect(throws: ManifestProblem.self) { try DaemonConfig.load(file: path, defaults: defaults, required: true) }
        try "state-dir = \"st\"\n[timings]\nexit-grace = 2\n".write(toFile: path, atomically: true, encoding: .utf8)
        let config = try DaemonConfig.load(file: path, defaults: defaults, required: true)
        #expect(config.stateDirectory == dir + "/st")
        #expect(config.timings.exitGrace == 2)
    }

    @Test func controlAndMonitorGroups() throws {
        #expect(defaults.systemMode && defaults.controlGroup == .name("vigil") && defaults.monitorGroup == nil)
        let user = DaemonConfig(system: false, environment: ["HOME": "/home/u"])
        #expect(!user.systemMode && user.controlGroup == nil)

        let config = try DaemonConfig.parse("control-group = \"operators\"\nmonitor-group = 4242\n", file: file, defaults: defaults)
        #expect(config.controlGroup == .name("operators"))
        #expect(config.monitorGroup == .id(4242))
        #expect(config.systemMode)
        let none = try DaemonConfig.parse("control-group = \"\"\n", file: file, defaults: defaults)
        #expect(none.controlGroup == nil)

        let bad = try #require(configProblem("monitor-group = \"a:b\""))
        #expect(bad.field == "monitor-group")
        #expect(bad.message.contains("not a user or group name"))
        #expect(configProblem("control-group = true")?.field == "control-group")
        #expect(configProblem("control-group = -3")?.message.contains("out of range") == true)
    }
}
