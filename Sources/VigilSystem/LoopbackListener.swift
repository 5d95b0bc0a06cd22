import CVigilShim
import Glibc
import Synchronization

/// A listening TCP socket on the loopback address (127.0.0.1) only, owned:
/// `close()` (or deinit) closes it. For endpoints a local scraper reaches by
/// port (the metrics endpoint by configuration); nothing else of Vigil's
/// listens on a network address.
public final class LoopbackListener: Sendable {
    /// Non-blocking: watch it for `.readable`, then `accept()` until nil.
    public let fd: Int32
    public let port: UInt16
    private let isClosed = Atomic(false)

    private init(fd: Int32, port: UInt16) {
        self.fd = fd
        self.port = port
    }

    deinit { close() }

    /// Binds 127.0.0.1:`port` (0: any free port; `port` then says which).
    public static func bind(port: UInt16, backlog: Int32 = 16) throws(SystemError) -> LoopbackListener {
        let fd = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SystemError.current("socket(AF_INET)") }
        do throws(SystemError) {
            var on: Int32 = 1
            _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<Int32>.size))
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = port.bigEndian
            address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard bound == 0 else { throw SystemError.current("bind(127.0.0.1:\(port))") }
            guard listen(fd, backlog) == 0 else { throw SystemError.current("listen(127.0.0.1:\(port))") }
            var actual = sockaddr_in()
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            _ = withUnsafeMutablePointer(to: &actual) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
            }
            return LoopbackListener(fd: fd, port: UInt16(bigEndian: actual.sin_port))
        } catch {
            _ = Glibc.close(fd)
            throw error
        }
    }

    /// The next waiting connection, or nil when none waits.
    public func accept() throws(SystemError) -> UnixStream? {
        try UnixStream.accept(on: fd, describing: "127.0.0.1:\(port)")
    }

    /// Idempotent.
    public func close() {
        guard !isClosed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        _ = Glibc.close(fd)
    }
}

extension UnixStream {
    /// The next connection waiting on a non-blocking listening socket (non-blocking
    /// and close-on-exec itself), or nil when none waits; what a listener's `accept` does.
    static func accept(on fd: Int32, describing listener: String) throws(SystemError) -> UnixStream? {
        while true {
            let client = vigil_accept(fd)
            if client >= 0 { return UnixStream(adopting: client) }
            switch errno {
            case EINTR, ECONNABORTED: continue
            case EAGAIN, EWOULDBLOCK: return nil
            default: throw SystemError.current("accept", path: listener)
            }
        }
    }
}
