import CVigilShim
import Glibc

/// One state change told to the service manager (sd_notify(3)'s assignments).
public enum SystemdNotification: Sendable, Equatable {
    /// Start-up is finished: clients can be served.
    case ready
    /// A reload began (`READY=1` ends it). Carries the clock reading
    /// `Type=notify-reload` (systemd 253) asks for; older ones ignore it.
    case reloading(MonotonicInstant)
    /// The stop began.
    case stopping
    /// A line for `systemctl status`; newlines become spaces.
    case status(String)
    /// The watchdog keep-alive.
    case watchdog

    /// The `VARIABLE=value` line sent for it.
    public var assignment: String {
        switch self {
        case .ready: "READY=1"
        case let .reloading(now): "RELOADING=1\nMONOTONIC_USEC=\(now.nanoseconds / 1000)"
        case .stopping: "STOPPING=1"
        case let .status(text): "STATUS=" + text.map { $0.isNewline ? " " : $0 }.reduce(into: "") { $0.append($1) }
        case .watchdog: "WATCHDOG=1"
        }
    }
}

/// Sends notifications to the service manager: one datagram per `send` to
/// the `$NOTIFY_SOCKET` it was made for (a path, or `@name` for an abstract
/// socket). The manager learns the sender from the datagram's credentials,
/// so with `NotifyAccess=main` only the main process may send: any thread of it.
public final class SystemdNotifier: Sendable {
    public let socketName: String
    private let fd: Int32
    private let address: UnixSocketAddress

    public init(socket name: String) throws {
        socketName = name
        address = try UnixSocketAddress(systemdName: name)
        fd = try UnixSocketAddress.makeSocket(type: SOCK_DGRAM, nonBlocking: true)
    }

    deinit {
        _ = Glibc.close(fd)
    }

    /// Sends `notifications` together, as one datagram. Never blocks: a
    /// manager that is not reading its socket gets nothing (EAGAIN).
    public func send(_ notifications: [SystemdNotification]) throws(SystemError) {
        let text = notifications.map(\.assignment).joined(separator: "\n") + "\n"
        var bytes = Array(text.utf8)
        let fd = self.fd
        try check("sendto", path: socketName) {
            address.withSockaddr { sockaddr, length in
                bytes.withUnsafeMutableBytes { sendto(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL), sockaddr, length) }
            }
        }
    }

    public func send(_ notification: SystemdNotification) throws(SystemError) {
        try send([notification])
    }
}

extension SystemdNotifier {
    /// Sends WATCHDOG=1 from `loop`'s own thread every half `interval` (as
    /// sd_watchdog_enabled(3) advises), so that a loop stuck in a handler
    /// stops the keep-alives and the manager acts. Returns the way to stop it.
    /// `failed` hears of a send that failed (on the loop thread).
    public func keepAlive(
        on loop: EventLoop, interval: Duration, failed: @escaping @Sendable (SystemError) -> Void = { _ in }
    ) -> SystemdWatchdog {
        let watchdog = SystemdWatchdog(loop: loop, notifier: self, period: interval / 2, failed: failed)
        loop.execute { watchdog.fire() }
        return watchdog
    }
}

/// The keep-alive timer `SystemdNotifier.keepAlive` runs: one timer on the
/// loop at a time, re-armed after each send.
public final class SystemdWatchdog: Sendable {
    let loop: EventLoop
    let notifier: SystemdNotifier
    public let period: Duration
    private let failed: @Sendable (SystemError) -> Void
    private let timer = Locked<TimerID?>(nil)
    private let stopped = Locked(false)

    init(loop: EventLoop, notifier: SystemdNotifier, period: Duration, failed: @escaping @Sendable (SystemError) -> Void) {
        self.loop = loop
        self.notifier = notifier
        self.period = period
        self.failed = failed
    }

    func fire() {
        guard !stopped.withLock({ $0 }) else { return }
        do {
            try notifier.send(.watchdog)
        } catch {
            failed(error)
        }
        let next = loop.schedule(after: period) { [self] in fire() }
        timer.withLock { $0 = next }
    }

    /// No keep-alive is sent after this returns on the loop thread.
    public func stop() {
        stopped.withLock { $0 = true }
        if let id = timer.withLock({ $0 }) { loop.cancelTimer(id) }
    }
}
