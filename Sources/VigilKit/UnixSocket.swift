import Glibc
import VigilProtocol

/// A blocking Unix stream socket, just what a client needs. Ownership of the
/// descriptor is manual: `Connection` closes it exactly once.
struct UnixSocket: Sendable {
    let descriptor: Int32

    /// Connects to the socket file at `path`.
    static func connect(to path: String) throws(ConnectionError) -> UnixSocket {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard path.utf8.count < capacity else { throw ConnectionError(path: path, errno: ENAMETOOLONG) }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: path.utf8)
        }

        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw ConnectionError(path: path, errno: errno) }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                retryingOnInterrupt { Glibc.connect(descriptor, address, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            }
        }
        guard result == 0 else {
            let failure = errno
            Glibc.close(descriptor)
            throw ConnectionError(path: path, errno: failure)
        }
        return UnixSocket(descriptor: descriptor)
    }

    /// Writes all of `bytes`. `MSG_NOSIGNAL`: a vanished daemon is an error, not SIGPIPE.
    func write(_ bytes: [UInt8]) throws(ProtocolError) {
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeBytes { raw in
                retryingOnInterrupt { send(descriptor, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL)) }
            }
            guard written > 0 else {
                throw ProtocolError(.disconnected, "cannot write to vigild: \(String(cString: strerror(errno)))")
            }
            offset += written
        }
    }

    /// Blocks until bytes arrive; 0 at end of stream, -1 on error (see `errno`).
    func read(into buffer: inout [UInt8]) -> Int {
        buffer.withUnsafeMutableBytes { raw in
            retryingOnInterrupt { Glibc.read(descriptor, raw.baseAddress, raw.count) }
        }
    }

    /// Ends both directions, which wakes a reader blocked in `read`.
    func shutdown() {
        _ = Glibc.shutdown(descriptor, Int32(SHUT_RDWR))
    }

    func close() {
        _ = Glibc.close(descriptor)
    }
}

private func retryingOnInterrupt<T: BinaryInteger>(_ call: () -> T) -> T {
    while true {
        let result = call()
        if result >= 0 || errno != EINTR { return result }
    }
}
