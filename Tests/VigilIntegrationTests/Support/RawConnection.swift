import Foundation
import Glibc
import VigilProtocol

/// A client that speaks raw frames, for what VigilKit would never send:
/// malformed and oversized frames, roles it may not take.
final class RawConnection {
    /// The members of a received header the tests look at.
    struct Header: Decodable, CustomStringConvertible {
        var type: String
        var code: String?
        var message: String?
        var id: Int?
        var role: String?

        var description: String { "\(type)\(code.map { " \($0)" } ?? "")\(message.map { ": \($0)" } ?? "")" }
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    let path: String
    private let fd: Int32
    private var decoder = FrameDecoder()
    private(set) var sawEndOfStream = false

    /// Connects; reads give up after `timeout` seconds.
    init(path: String, timeout: Double = 10) throws {
        self.path = path
        fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "socket: \(String(cString: strerror(errno)))") }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: path.utf8) }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard result == 0 else {
            let error = String(cString: strerror(errno))
            close(fd)
            throw Failure(description: "connect \(path): \(error)")
        }
        var limit = timeval(tv_sec: Int(timeout), tv_usec: Int((timeout - timeout.rounded(.down)) * 1e6))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit { close(fd) }

    func send(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
            guard written > 0 else { throw Failure(description: "send: \(String(cString: strerror(errno)))") }
            offset += written
        }
    }

    /// A frame with a prefix that tells the truth about `header` and `body`.
    func send(header: String, body: [UInt8] = []) throws {
        try send(Self.prefix(header: UInt32(header.utf8.count), body: UInt32(body.count)) + Array(header.utf8) + body)
    }

    func hello(role: String, app: String? = nil) throws {
        let claim = app.map { #","app":"\#($0)""# } ?? ""
        try send(header: #"{"type":"hello","versions":[1],"role":"\#(role)"\#(claim),"client":"integration-tests"}"#)
    }

    static func prefix(header: UInt32, body: UInt32) -> [UInt8] {
        var bytes: [UInt8] = []
        withUnsafeBytes(of: header.littleEndian) { bytes.append(contentsOf: $0) }
        withUnsafeBytes(of: body.littleEndian) { bytes.append(contentsOf: $0) }
        return bytes
    }

    /// The next frame's header; nil at end of stream. Throws on a read timeout.
    func next() throws -> Header? {
        while true {
            if let frame = try decoder.next() {
                do {
                    return try JSONDecoder().decode(Header.self, from: Data(frame.header))
                } catch {
                    throw Failure(description: "undecodable header \(String(decoding: frame.header, as: UTF8.self)): \(error)")
                }
            }
            if sawEndOfStream { return nil }
            var buffer = [UInt8](repeating: 0, count: 65536)
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                if errno == ECONNRESET { sawEndOfStream = true; continue }
                throw Failure(description: "read: \(String(cString: strerror(errno))) (no answer from vigild in time)")
            }
            if count == 0 { sawEndOfStream = true; continue }
            decoder.append(buffer[0..<count])
        }
    }

    /// Every frame until the daemon closes the connection.
    func readUntilClosed() throws -> [Header] {
        var headers: [Header] = []
        while let header = try next() { headers.append(header) }
        return headers
    }
}
