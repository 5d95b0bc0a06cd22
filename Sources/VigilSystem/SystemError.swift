import Glibc
import SystemPackage

/// A failed system call, with enough context to act on the message alone:
/// what was attempted, on which path, and the kernel's answer.
public struct SystemError: Error, Sendable, Hashable, CustomStringConvertible {
    public var errno: Errno
    /// The call or step that failed, e.g. "open" or "write cgroup.freeze".
    public var operation: String
    public var path: String?

    public init(_ errno: Errno, _ operation: String, path: String? = nil) {
        self.errno = errno
        self.operation = operation
        self.path = path
    }

    /// The error for the calling thread's current `errno`.
    static func current(_ operation: String, path: String? = nil) -> SystemError {
        SystemError(Errno(rawValue: Glibc.errno), operation, path: path)
    }

    public var description: String {
        guard let path else { return "\(operation): \(errno)" }
        return "\(operation) \(path): \(errno)"
    }
}

/// Runs a C call that signals failure with -1 and `errno`, retrying on EINTR,
/// because every caller would otherwise repeat the same loop. Package-wide, so
/// the other wrapper targets (serial, udev) use the same loop.
@discardableResult
package func check<Result: FixedWidthInteger>(
    _ operation: String,
    path: String? = nil,
    _ call: () -> Result
) throws(SystemError) -> Result {
    while true {
        let result = call()
        if result != -1 { return result }
        if Glibc.errno == EINTR { continue }
        throw SystemError.current(operation, path: path)
    }
}
