import Glibc
import SystemPackage
import VigilSystem

/// Why a Bluetooth socket call (L2CAP or RFCOMM) failed, sorted into the
/// cases a caller acts on differently. Everything else is the system call's
/// own error, in the system's words: what an errno means depends on the
/// protocol (ECONNREFUSED: no such PSM, or nothing on that RFCOMM channel),
/// so the daemon's components add that (`L2CAPComponent.protocolError`,
/// `RFCOMMComponent.protocolError`).
public enum BluetoothSocketError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The kernel has no Bluetooth (socket(AF_BLUETOOTH) fails with
    /// EAFNOSUPPORT, or EPROTONOSUPPORT without the protocol's module): no
    /// module, or a container/VM kernel built without it.
    case bluetoothUnavailable(Errno)
    /// A value the kernel would refuse, caught before asking it.
    case invalidArgument(String)
    case system(SystemError)

    static func from(_ error: SystemError) -> BluetoothSocketError {
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
            "Bluetooth unavailable: this kernel has no Bluetooth sockets of that protocol (socket(AF_BLUETOOTH): \(errno))"
        case let .invalidArgument(text): text
        case let .system(error): "\(error)"
        }
    }
}

/// Runs a C call that signals failure with -1 and `errno`, retrying on EINTR.
@discardableResult
func bluetoothCheck<Result: FixedWidthInteger>(_ operation: String, _ call: () -> Result) throws(BluetoothSocketError) -> Result {
    while true {
        let result = call()
        if result != -1 { return result }
        if Glibc.errno == EINTR { continue }
        throw .from(SystemError(Errno(rawValue: Glibc.errno), operation))
    }
}
