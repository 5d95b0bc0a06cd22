import CVigilShim

/// Readiness conditions of a file descriptor; the raw values are epoll's bits.
public struct IOEvents: OptionSet, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt32

    public init(rawValue: UInt32) {
        self.rawValue = rawValue
    }

    public static let readable = IOEvents(rawValue: EPOLLIN.rawValue)
    public static let writable = IOEvents(rawValue: EPOLLOUT.rawValue)
    /// Urgent data; also how kernfs files such as cgroup.events say "changed".
    public static let priority = IOEvents(rawValue: EPOLLPRI.rawValue)
    /// The peer hung up (either side, or just its writing half).
    /// Always reported by the kernel, whether or not it was asked for.
    public static let hangup = IOEvents(rawValue: EPOLLHUP.rawValue)
    /// Always reported by the kernel, whether or not it was asked for.
    public static let error = IOEvents(rawValue: EPOLLERR.rawValue)

    /// The epoll mask to register: asking for `.hangup` also asks for EPOLLRDHUP.
    var epollMask: UInt32 {
        contains(.hangup) ? rawValue | EPOLLRDHUP.rawValue : rawValue
    }

    /// The events epoll reported, with EPOLLRDHUP folded into `.hangup`.
    init(epoll events: UInt32) {
        var result = IOEvents(rawValue: events & (EPOLLIN.rawValue | EPOLLOUT.rawValue
            | EPOLLPRI.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue))
        if events & EPOLLRDHUP.rawValue != 0 { result.insert(.hangup) }
        self = result
    }

    public var description: String {
        let names: [(IOEvents, String)] = [
            (.readable, "readable"), (.writable, "writable"), (.priority, "priority"),
            (.hangup, "hangup"), (.error, "error"),
        ]
        return "[" + names.filter { contains($0.0) }.map(\.1).joined(separator: ", ") + "]"
    }
}
