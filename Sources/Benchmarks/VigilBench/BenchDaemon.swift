import Foundation
import Glibc
import VigilKit
import VigilSystem

/// A real vigild in a scratch directory, with the sample app installed.
final class BenchDaemon {
    let directory: String
    let socket: String
    let recordPath: String
    let cgroupRoot: String?
    let process: Process
    let control: ControlClient
    static let appID = "org.vigil.bench"

    init(binaries: String, suspension: String) async throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("vigil-bench-\(getpid())-\(suspension)").path
        try? FileManager.default.removeItem(atPath: directory)
        try FileManager.default.createDirectory(atPath: directory + "/apps", withIntermediateDirectories: true)
        socket = directory + "/vigild.sock"
        recordPath = directory + "/record.jsonl"
        cgroupRoot = suspension == "cgroup" ? Cgroup.unifiedMountPoint().map { $0 + "/vigil-bench-\(getpid())" } : nil
        var config = """
            manifest-dirs = ["apps"]
            state-dir = "state"
            log-dir = "logs"
            suspension = "\(suspension)"
            event-queue-limit = 100000
            decision-log-size = 100

            """
        if let cgroupRoot { config += "cgroup-root = \"\(cgroupRoot)\"\n" }
        try config.write(toFile: directory + "/vigild.toml", atomically: true, encoding: .utf8)
        try """
            id = "\(Self.appID)"
            exec = ["\(binaries)/vigil-demo-app"]
            [environment]
            VIGIL_DEMO_RECORD = "\(recordPath)"
            VIGIL_DEMO_QUIET = "1"
            """.write(toFile: directory + "/apps/bench.toml", atomically: true, encoding: .utf8)

        process = Process()
        process.executableURL = URL(fileURLWithPath: binaries + "/vigild")
        process.arguments = ["--socket", socket, "--config", directory + "/vigild.toml", "--log-level", "warning"]
        process.standardOutput = FileHandle(forWritingAtPath: "/dev/null")
        _ = FileManager.default.createFile(atPath: directory + "/vigild.log", contents: nil)
        process.standardError = FileHandle(forWritingAtPath: directory + "/vigild.log")
        try process.run()
        control = try await Self.connect(socket)
    }

    private static func connect(_ socket: String) async throws -> ControlClient {
        let deadline = MonotonicInstant.now().advanced(by: .seconds(10))
        while true {
            do {
                return try await ControlClient.connect(socketPath: socket)
            } catch where MonotonicInstant.now() < deadline {
                try await Task.sleep(for: .milliseconds(20))
            }
        }
    }

    var pid: Int32 { process.processIdentifier }

    func stop() {
        control.close()
        process.terminate()
        process.waitUntilExit()
        if let cgroupRoot {
            let root = Cgroup(path: cgroupRoot)
            for child in (try? root.children()) ?? [] {
                try? root.child(child).kill()
                _ = try? root.child(child).waitUntil(populated: false, timeout: .seconds(5))
                try? root.child(child).remove()
            }
            try? root.remove()
        }
        try? FileManager.default.removeItem(atPath: directory)
    }
}
