import Glibc
import SystemPackage
import VigilSystem

/// Why an L2CAP socket call failed, sorted into the cases a caller acts on
/// differently. Everything else is the system call's own error.
public enum L2CAPError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The kernel has no Bluetooth (socket(AF_BLUETOOTH) fails with
    /// EAFNOSUPPORT, or EPROTONOSUPPORT without the L2CAP protocol): no
    /// module, or a container/VM kernel built without it.
    case bluetoothUnavailable(Errno)
    /// A value the kernel would refuse, caught before asking it.
    case invalidArgument(String)
    case system(SystemError)

    static func from(_ error: SystemError) -> L2CAPError {
        switch error.errno {
        case .addressFamilyNotSupported, .protocolNotSupported: .bluetoothUnavailable(error.errno)
        default: .system(error)
        }
    }

    /// The kernel's errno, if the kernel answered.
    public var errno: Errno? {
        switch self {
        case let .bluetoothUnavailable(errno): errno
        case .invalidArgument: nil
        case let .system(error): error.errno
        }
    }

    public var description: String {
        switch self {
        case let .bluetoothUnavailable(errno):
            "Bluetooth unavailable: this kernel has no Bluetooth L2CAP sockets (socket(AF_BLUETOOTH): \(errno))"
        case let .invalidArgument(text): text
        case let .system(error):
            switch error.errno {
            case .connectionRefused: "\(error) (the device offers no channel on that PSM, or refused it)"
            case .addressInUse: "\(error) (the PSM is already in use on this adapter)"
            case .permissionDenied: "\(error) (fixed PSMs below 128 need CAP_NET_BIND_SERVICE)"
            case .noRouteToHost, .hostIsDown: "\(error) (no Bluetooth adapter is up for that address)"
            default: "\(error)"
            }
        }
    }
}

/// Runs a C call that signals failure with -1 and `errno`, retrying on EINTR.
@discardableResult
func l2capCheck<Result: FixedWidthInteger>(_ operation: String, _ call: () -> Result) throws(L2CAPError) -> Result {
    while true {
        let result = call()
        if result != -1 { return result }
        if Glibc.errno == EINTR { continue }
        throw .from(SystemError(Errno(rawValue: Glibc.errno), operation))
    }
}
