import Foundation
import Glibc
import VigilProtocol
import VigilSystem

/// A scripted stand-in for vigild, for VigilKit behaviour that needs no real
/// daemon (routing, holding and acknowledging events): it greets every
/// connection as the app `org.vigil.test.fake`, records what it is sent, and
/// answers requests with `respond` (by default `Done`). The test sends events
/// itself. One connection at a time: a new one replaces the last.
final class FakeDaemon: @unchecked Sendable {
    let path: String
    private let listener: Int32
    private let state = Locked(State())

    struct State {
        var received: [IncomingMessage] = []
        var connection: Int32?
        var connections = 0
        var respond: @Sendable (IncomingMessage) -> (header: String, body: [UInt8])? = { _ in nil }
        /// The welcome's `features`: nil plays a daemon from before any.
        var features: [String]?
    }

    /// Sets the `features` of the next welcomes.
    func setFeatures(_ features: [String]?) { state.withLock { $0.features = features } }

    struct Failure: Error, CustomStringConvertible { var description: String }

    init() throws {
        path = "/tmp/vigil-fake-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).sock"
        unlink(path)
        listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: path.utf8) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0, listen(listener, 4) == 0 else { throw Failure(description: "bind \(path): \(String(cString: strerror(errno)))") }
        let thread = Thread { [self] in acceptLoop() }
        thread.start()
    }

    /// Closes the listener and the connection.
    ///
    /// Every fd is closed only by the thread that uses it, and only while no
    /// one else can still reach it (the connection under the lock): tests run
    /// in parallel in one process, and an fd number closed twice, or used
    /// after its close, would be another test's socket by then.
    func stop() {
        shutdown(listener, Int32(SHUT_RDWR))  // the accept thread closes it
        dropConnection()
        unlink(path)
    }

    /// How to answer a request (its reply header as JSON, `id` added); nil: `{"type":"reply"}`.
    func respond(_ answer: @escaping @Sendable (IncomingMessage) -> (header: String, body: [UInt8])?) {
        state.withLock { $0.respond = answer }
    }

    var connections: Int { state.withLock { $0.connections } }

    /// Everything received so far (every connection), in order.
    var received: [IncomingMessage] { state.withLock { $0.received } }

    func received(_ type: String) -> [IncomingMessage] { received.filter { $0.type == type } }

    /// The `seq` of every `ack` received, in order.
    var acks: [UInt64] { received(Acknowledge.type).compactMap { try? $0.decode(Acknowledge.self).seq } }

    /// Waits until `condition` holds on what was received.
    func waitFor(_ what: String, timeout: Double = 5, _ condition: @Sendable ([IncomingMessage]) -> Bool) async throws {
        let deadline = Date().addingTimeInterval(timeout)
        while !condition(received) {
            guard Date() < deadline else { throw Failure(description: "timed out waiting for \(what); received \(received.map(\.type))") }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    func event(_ seq: UInt64, _ kind: String, _ attributes: [String: JSONValue] = [:], body: [UInt8] = [], redelivered: Bool = false) {
        send(MessageCodec.frame(EventMessage(seq: seq, kind: kind, attributes: attributes, redelivered: redelivered), body: body))
    }

    func send(_ frame: Frame) {
        let bytes = frame.encoded()
        // Under the lock: the reading thread cannot close the fd meanwhile.
        state.withLock { state in
            guard let fd = state.connection else { return }
            var offset = 0
            while offset < bytes.count {
                let written = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
                guard written > 0 else { return }
                offset += written
            }
        }
    }

    /// Hangs up, as a daemon that stops would.
    func dropConnection() {
        state.withLock { state in
            if let fd = state.connection.take() { shutdown(fd, Int32(SHUT_RDWR)) }
        }
    }

    private func acceptLoop() {
        while true {
            let fd = accept(listener, nil, nil)
            guard fd >= 0 else {
                close(listener)
                return
            }
            state.withLock { state in
                if let old = state.connection { shutdown(old, Int32(SHUT_RDWR)) }
                state.connection = fd
            }
            let thread = Thread { [self] in readLoop(fd) }
            thread.start()
        }
    }

    private func readLoop(_ fd: Int32) {
        defer {
            state.withLock { state in
                if state.connection == fd { state.connection = nil }
                close(fd)
            }
        }
        var decoder = FrameDecoder()
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            guard count > 0 else { return }
            decoder.append(buffer[0..<count])
            while let frame = try? decoder.next(), let message = try? IncomingMessage(frame: frame) {
                let respond = state.withLock { state in
                    state.received.append(message)
                    return state.respond
                }
                if message.type == Hello.type {
                    let features = state.withLock { state in
                        state.connections += 1
                        return state.features
                    }
                    send(MessageCodec.frame(Welcome(
                        version: 1, daemon: "fake", role: .app, app: "org.vigil.test.fake", state: .active,
                        launch: LaunchOptions(reason: .user), limits: .default, features: features)))
                } else if let id = message.id {
                    let answer = respond(message) ?? (#"{"type":"reply"}"#, [])
                    var header = answer.header
                    header.removeLast()
                    header += #","id":\#(id)}"#
                    send(Frame(header: Array(header.utf8), body: answer.body))
                }
            }
        }
    }
}
