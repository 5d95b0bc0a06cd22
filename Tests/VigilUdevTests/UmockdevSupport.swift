import Glibc
import Testing
import VigilSystem

/// How VigilUdevTests get into a umockdev testbed from plain `swift test`.
///
/// libudev only sees umockdev's fake /sys, /dev and uevents when
/// libumockdev-preload is loaded into the process from its start, so the
/// checks cannot run in the test runner itself. `UmockdevTests` re-executes
/// this test binary as
///
///     umockdev-wrapper /usr/bin/python3 umockdev-testbed.py -- \
///         <this binary> --testing-library swift-testing --filter UmockdevChild
///
/// with VIGIL_UMOCKDEV_CHILD=1: the Python script builds the testbed (GI
/// API), starts the binary inside it, and serves its requests for uevents
/// and pty traffic; `UmockdevChild` holds the actual checks.
enum Umockdev {
    static let childFlag = "VIGIL_UMOCKDEV_CHILD"

    static var isChild: Bool { getenv(childFlag) != nil }

    static let harness = String(#filePath.dropLast("UmockdevSupport.swift".count)) + "umockdev-testbed.py"

    /// Why the testbed cannot run here, or nil if it can.
    static let unavailableReason: String? = {
        for path in ["/usr/bin/umockdev-wrapper", "/usr/bin/python3"] where access(path, X_OK) != 0 {
            return "\(path) missing: apt-get install umockdev gir1.2-umockdev-1.0 python3-gi"
        }
        let probe = "import gi; gi.require_version('UMockdev', '1.0'); from gi.repository import UMockdev"
        guard let status = try? run(SpawnRequest(executable: "/usr/bin/python3", arguments: ["-c", probe]),
                                    timeoutSeconds: 30),
              status == .exited(0)
        else { return "python3 cannot load the UMockdev GI binding: apt-get install gir1.2-umockdev-1.0 python3-gi" }
        return nil
    }()

    /// This test binary, for re-executing it.
    static func ownExecutable() throws -> String {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let length = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        guard length > 0 else { throw HarnessError("readlink /proc/self/exe: errno \(errno)") }
        return buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    }

    /// Runs a process to completion, killing its process group after the
    /// timeout; nil if it had to be killed.
    static func run(_ request: SpawnRequest, timeoutSeconds: Int32) throws -> ProcessStatus? {
        var request = request
        request.newSession = true
        let process = try ProcessSpawner.spawn(request)
        defer { if process.pidfd >= 0 { close(process.pidfd) } }
        var exit = pollfd(fd: process.pidfd, events: Int16(POLLIN), revents: 0)
        var remaining = timeoutSeconds * 1000
        while remaining > 0 {
            let result = poll(&exit, 1, 100)
            if result > 0 { break }
            remaining -= 100
        }
        if remaining <= 0 {
            try? ProcessControl.sendSignal(SIGKILL, toProcessGroup: process.pid)
            var wait = pollfd(fd: process.pidfd, events: Int16(POLLIN), revents: 0)
            _ = poll(&wait, 1, 5000)
            _ = try ProcessControl.reap(process)
            return nil
        }
        return try ProcessControl.reap(process)
    }
}

/// The child's side of the testbed's request pipes (see umockdev-testbed.py).
final class TestbedControl {
    private let requests: Int32
    private let replies: Int32

    init() throws {
        let fds = (getenv("VIGIL_UMOCKDEV_CONTROL").map { String(cString: $0) } ?? "")
            .split(separator: " ").compactMap { Int32($0) }
        try #require(fds.count == 2, "VIGIL_UMOCKDEV_CONTROL not set: run through UmockdevTests")
        (requests, replies) = (fds[0], fds[1])
    }

    /// Sends one request line, returns the reply line.
    @discardableResult
    func request(_ line: String) -> String {
        let bytes = Array((line + "\n").utf8)
        _ = bytes.withUnsafeBytes { Glibc.write(requests, $0.baseAddress, $0.count) }
        var reply: [UInt8] = []
        var byte: UInt8 = 0
        while Glibc.read(replies, &byte, 1) == 1 && byte != UInt8(ascii: "\n") { reply.append(byte) }
        return String(decoding: reply, as: UTF8.self)
    }

    func write(_ bytes: [UInt8]) {
        #expect(request("write " + hex(bytes)) == "ok")
    }

    func read(count: Int) -> [UInt8] {
        let reply = request("read \(count)")
        guard reply.hasPrefix("data ") else { Issue.record("testbed: \(reply)"); return [] }
        let digits = Array(reply.dropFirst(5).utf8)
        return stride(from: 0, to: digits.count - 1, by: 2).compactMap {
            UInt8(String(decoding: digits[$0...$0 + 1], as: UTF8.self), radix: 16)
        }
    }
}

func hex(_ bytes: [UInt8]) -> String {
    bytes.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
}

struct HarnessError: Error, CustomStringConvertible {
    var description: String

    init(_ description: String) {
        self.description = description
    }
}
