import Foundation
import Testing
import VigilProtocol
@testable import VigilLifecycle

@Suite("Daemon configuration")
struct DaemonConfigTests {
    let file = "/etc/vigil/vigild.toml"
    let defaults = DaemonConfig(system: true)

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
        #expect(user.manifestDirectories.last == "/home/u/.config/vigil/apps")
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
}
