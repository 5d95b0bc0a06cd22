import Glibc
import Testing
import VigilDBus
import VigilSystem

/// A private dbus-daemon for one test: its own config, socket and
/// directory, killed (SIGKILL, which no blocked signal mask can stop) and
/// removed afterwards. Its output goes to a file, never to the test runner's
/// stdout, which would keep `swift test` waiting.
final class TestBus: Sendable {
    let directory: String
    let address: String
    let process: SpawnedProcess

    private init(directory: String, address: String, process: SpawnedProcess) {
        self.directory = directory
        self.address = address
        self.process = process
    }

    static func start() throws -> TestBus {
        let directory = "/tmp/vigil-dbus-\(getpid())-\(MonotonicInstant.now().nanoseconds)"
        guard mkdir(directory, 0o700) == 0 else { throw TestFailure("mkdir \(directory): errno \(errno)") }
        let config = """
        <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
        <busconfig>
          <type>system</type>
          <listen>unix:path=\(directory)/bus</listen>
          <auth>EXTERNAL</auth>
          <policy context="default">
            <allow send_destination="*" eavesdrop="true"/>
            <allow eavesdrop="true"/>
            <allow own="*"/>
            <allow user="*"/>
          </policy>
        </busconfig>
        """
        try write(config, to: directory + "/bus.conf")
        let output = open(directory + "/daemon.out", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard output >= 0 else { throw TestFailure("open daemon.out: errno \(errno)") }
        defer { close(output) }
        let process = try ProcessSpawner.spawn(SpawnRequest(
            executable: "/usr/bin/dbus-daemon",
            arguments: ["--config-file=\(directory)/bus.conf", "--nofork", "--print-address=1"],
            output: output))
        let bus = TestBus(directory: directory, address: "", process: process)
        // The address line appears once the daemon listens.
        let deadline = MonotonicInstant.now().advanced(by: .seconds(10))
        while MonotonicInstant.now() < deadline {
            let printed = read(directory + "/daemon.out")
            if let line = printed.split(separator: "\n").first(where: { $0.hasPrefix("unix:") }) {
                return TestBus(directory: directory, address: String(line), process: process)
            }
            usleep(10_000)
        }
        bus.stop()
        throw TestFailure("dbus-daemon did not start: \(read(directory + "/daemon.out"))")
    }

    /// Kills the daemon (idempotent) and reaps it.
    func kill() {
        try? ProcessControl.sendSignal(SIGKILL, toPidfd: process.pidfd)
        var request = pollfd(fd: process.pidfd, events: Int16(POLLIN), revents: 0)
        _ = poll(&request, 1, 5000)
        _ = try? ProcessControl.reap(process)
    }

    func stop() {
        kill()
        close(process.pidfd)
        for file in ["bus", "bus.conf", "daemon.out", "client.py", "client.out"] { unlink(directory + "/" + file) }
        rmdir(directory)
    }
}

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

func write(_ text: String, to path: String) throws {
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
    guard fd >= 0 else { throw TestFailure("open \(path): errno \(errno)") }
    defer { close(fd) }
    let bytes = Array(text.utf8)
    guard Glibc.write(fd, bytes, bytes.count) == bytes.count else { throw TestFailure("write \(path)") }
}

func read(_ path: String) -> String {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return "" }
    defer { close(fd) }
    var result: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    while true {
        let count = Glibc.read(fd, &buffer, buffer.count)
        if count <= 0 { return String(decoding: result, as: UTF8.self) }
        result += buffer[..<count]
    }
}

/// A bus and a running loop for the body; everything is stopped afterwards.
func withBus(_ body: (TestBus, EventLoop) async throws -> Void) async throws {
    let bus = try TestBus.start()
    defer { bus.stop() }
    let loop = try EventLoop(name: "dbus-test")
    loop.start()
    defer {
        loop.stop()
        loop.waitUntilStopped()
    }
    try await body(bus, loop)
}

/// Values recorded from handlers (loop thread), for the test to await.
final class Recorder<Value: Sendable>: Sendable {
    private let values = Locked<[Value]>([])

    func append(_ value: Value) { values.withLock { $0.append(value) } }

    var snapshot: [Value] { values.withLock { $0 } }

    /// Polls until `count` values arrived or `timeout` passed.
    @discardableResult
    func wait(forCount count: Int, timeout: Duration = .seconds(5)) async -> [Value] {
        let deadline = MonotonicInstant.now().advanced(by: timeout)
        while snapshot.count < count && MonotonicInstant.now() < deadline {
            try? await Task.sleep(for: .milliseconds(5))
        }
        return snapshot
    }
}

/// Runs `body`, giving up (cancelling it) after `limit`.
func withTimeout<T: Sendable>(
    _ limit: Duration, _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try? await Task.sleep(for: limit)
            return nil
        }
        defer { group.cancelAll() }
        guard let first = try await group.next(), let value = first else {
            throw TestFailure("timed out after \(limit)")
        }
        return value
    }
}

/// The error a throwing async call ended with, nil if it succeeded.
func errorOf(_ body: () async throws -> Void) async -> (any Error)? {
    do {
        try await body()
        return nil
    } catch {
        return error
    }
}

/// Two connections on the same bus: one exports, the other calls.
func withConnections(
    _ body: (TestBus, DBusConnection, DBusConnection) async throws -> Void
) async throws {
    try await withBus { bus, loop in
        let server = try await DBusConnection.open(address: bus.address, on: loop)
        let client = try await DBusConnection.open(address: bus.address, on: loop)
        do {
            try await body(bus, server, client)
        } catch {
            await server.close()
            await client.close()
            throw error
        }
        await server.close()
        await client.close()
    }
}
