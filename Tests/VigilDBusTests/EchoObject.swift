import Glibc
import VigilDBus
import VigilSystem

/// The test object exported at /echo (interface org.vigil.Test).
enum Echo {
    static let path: ObjectPath = "/echo"
    static let interface = "org.vigil.Test"

    /// Calls kept unanswered on purpose, so they are not dropped.
    final class Held: Sendable {
        let calls = Locked<[DBusMethodCall]>([])
        /// Members of the calls received (not the calls: that would keep them alive).
        let received = Recorder<String>()
    }

    /// Exports the object on `server`:
    /// Echo (returns its arguments), Fail (error reply), Slow (answers
    /// after sleeping `ms` milliseconds, given as a u argument), Never (held, no
    /// answer), Drop (released unanswered), ReadFD (reads a fd argument to EOF),
    /// MakePipe (returns the read end of a pipe holding its string argument).
    @discardableResult
    static func export(on server: DBusConnection) async throws -> Held {
        let held = Held()
        try await server.export(path) { call in
            held.received.append(call.member)
            guard call.interface == interface else { return call.replyUnknownMethod() }
            switch call.member {
            case "Echo":
                try? call.reply(call.arguments)
            case "Fail":
                call.replyError(name: "org.vigil.Test.Error.Boom", message: "boom")
            case "Slow":
                let milliseconds = call.arguments.first?.uint32 ?? 100
                Task {
                    try? await Task.sleep(for: .milliseconds(milliseconds))
                    try? call.reply([.string("slow done")])
                }
            case "Never":
                held.calls.withLock { $0.append(call) }
            case "Drop":
                break
            case "ReadFD":
                guard let fd = call.arguments.first?.unixFD else {
                    return call.replyError(.invalidArgs("expected h"))
                }
                let text = readAll(fd)
                close(fd)  // the handler owns received fds
                try? call.reply([.string(text)])
            case "MakePipe":
                var fds: [Int32] = [-1, -1]
                guard pipe(&fds) == 0 else { return call.replyError(.failed("pipe")) }
                let bytes = Array((call.arguments.first?.string ?? "").utf8)
                _ = Glibc.write(fds[1], bytes, bytes.count)
                close(fds[1])
                try? call.reply([.unixFD(fds[0])])
                close(fds[0])  // libdbus sent a duplicate
            default:
                call.replyUnknownMethod()
            }
        }
        return held
    }

    static func readAll(_ fd: Int32) -> String {
        var result: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 256)
        while true {
            let count = Glibc.read(fd, &buffer, buffer.count)
            if count <= 0 { return String(decoding: result, as: UTF8.self) }
            result += buffer[..<count]
        }
    }
}

extension DBusConnection {
    /// Calls a method of the echo object exported by `server`.
    func callEcho(
        _ server: DBusConnection, _ member: String, _ arguments: [DBusValue] = [], timeout: Duration = .seconds(5)
    ) async throws -> [DBusValue] {
        try await call(destination: await server.uniqueName, path: Echo.path, interface: Echo.interface,
                       member: member, arguments: arguments, timeout: timeout)
    }
}
