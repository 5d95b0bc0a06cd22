import CBluetooth

/// A Bluetooth device address ("AA:BB:CC:DD:EE:FF", most significant byte
/// first, as BlueZ and people write it), held in the kernel's order
/// (`bdaddr_t`: least significant byte first).
public struct BluetoothDeviceAddress: Sendable, Hashable, CustomStringConvertible {
    /// Least significant byte first, as in `bdaddr_t`.
    public let littleEndianBytes: [UInt8]

    public static let any = BluetoothDeviceAddress(littleEndian: [0, 0, 0, 0, 0, 0])

    /// Parses "AA:BB:CC:DD:EE:FF" (either case); nil for anything else.
    public init?(_ text: String) {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 6 else { return nil }
        var bytes: [UInt8] = []
        for part in parts {
            guard part.count == 2, let byte = UInt8(part, radix: 16) else { return nil }
            bytes.append(byte)
        }
        littleEndianBytes = bytes.reversed()
    }

    init(littleEndian bytes: [UInt8]) {
        littleEndianBytes = bytes
    }

    init(_ address: bdaddr_t) {
        littleEndianBytes = withUnsafeBytes(of: address.b) { Array($0) }
    }

    var bdaddr: bdaddr_t {
        var address = bdaddr_t()
        withUnsafeMutableBytes(of: &address.b) { $0.copyBytes(from: littleEndianBytes) }
        return address
    }

    public var description: String {
        littleEndianBytes.reversed().map { byte in
            let hex = String(byte, radix: 16, uppercase: true)
            return hex.count == 1 ? "0" + hex : hex
        }.joined(separator: ":")
    }
}

/// The kind of address, which the kernel needs to find the link: an LE
/// device's public or random address, or a BR/EDR (classic) one.
public enum BluetoothAddressType: UInt8, Sendable, Hashable, CustomStringConvertible {
    case bredr = 0  // BDADDR_BREDR
    case lePublic = 1  // BDADDR_LE_PUBLIC
    case leRandom = 2  // BDADDR_LE_RANDOM

    /// BlueZ's `Device1.AddressType` ("public", "random"): LE addresses.
    public init?(blueZ text: String) {
        switch text {
        case "public": self = .lePublic
        case "random": self = .leRandom
        default: return nil
        }
    }

    public var isLE: Bool { self != .bredr }

    public var description: String {
        switch self {
        case .bredr: "BR/EDR"
        case .lePublic: "LE public"
        case .leRandom: "LE random"
        }
    }
}

/// A Protocol/Service Multiplexer: which service on the device a channel
/// reaches. On LE, 0x0001-0x007F are fixed (assigned by the Bluetooth SIG;
/// binding one needs CAP_NET_BIND_SERVICE) and 0x0080-0x00FF dynamic.
public struct L2CAPPSM: Sendable, Hashable, Comparable, CustomStringConvertible {
    public let value: UInt16

    public static let leDynamic: ClosedRange<UInt16> = 0x0080...0x00FF
    public static let leValid: ClosedRange<UInt16> = 0x0001...0x00FF

    /// An LE PSM (0x0001-0x00FF), or an error naming the range.
    public init(le value: Int) throws(BluetoothSocketError) {
        guard let value = UInt16(exactly: value), Self.leValid.contains(value) else {
            throw .invalidArgument("PSM \(value) is not an LE PSM (1-255: 1-127 fixed, 128-255 dynamic)")
        }
        self.value = value
    }

    /// A PSM as the kernel reported it (getsockname), not checked.
    public init(bound value: UInt16) {
        self.value = value
    }

    public var isDynamic: Bool { Self.leDynamic.contains(value) }
    public static func < (a: L2CAPPSM, b: L2CAPPSM) -> Bool { a.value < b.value }
    public var description: String { "\(value) (0x\(String(value, radix: 16)))" }
}

/// BT_SECURITY levels: what the link must have before data flows.
public enum L2CAPSecurity: UInt8, Sendable, CaseIterable, CustomStringConvertible {
    /// No encryption (the kernel's default for LE channels).
    case low = 1  // BT_SECURITY_LOW
    /// Encrypted, unauthenticated pairing is enough.
    case medium = 2  // BT_SECURITY_MEDIUM
    /// Encrypted with an authenticated (MITM-protected) key.
    case high = 3  // BT_SECURITY_HIGH
    /// Secure Connections only, 128-bit key.
    case fips = 4  // BT_SECURITY_FIPS

    public init?(name: String) {
        guard let level = Self.allCases.first(where: { $0.description == name }) else { return nil }
        self = level
    }

    public var description: String {
        switch self {
        case .low: "low"
        case .medium: "medium"
        case .high: "high"
        case .fips: "fips"
        }
    }
}
