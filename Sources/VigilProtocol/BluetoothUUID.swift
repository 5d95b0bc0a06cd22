/// Bluetooth UUIDs in the one form the daemon compares and sends: lowercase,
/// 128-bit, hyphenated ("0000180d-0000-1000-8000-00805f9b34fb").
///
/// Apps and people write 16- or 32-bit short forms ("180D", "0x2a37"); BlueZ
/// always reports the full form. Normalising at every entry point means a
/// comparison is a string equality, never a guess. One definition for the
/// daemon and the clients (VigilKit's `GATTUUID` is this).
public enum BluetoothUUID {
    static let baseSuffix = "-0000-1000-8000-00805f9b34fb"

    /// The canonical form of `text`, or nil if it is not a Bluetooth UUID.
    public static func normalize(_ text: String) -> String? {
        var hex = text.lowercased()
        if hex.hasPrefix("0x") { hex.removeFirst(2) }
        // ASCII only: Character.isHexDigit also accepts fullwidth digits ("１８０ｄ"), which BlueZ refuses.
        guard !hex.isEmpty, hex.allSatisfy({ ($0.isASCII && $0.isHexDigit) || $0 == "-" }) else { return nil }
        let digits = hex.filter { $0 != "-" }
        switch digits.count {
        case 4 where !hex.contains("-"): return "0000" + digits + baseSuffix
        case 8 where !hex.contains("-"): return digits + baseSuffix
        case 32:
            let d = Array(digits)
            return String(d[0..<8]) + "-" + String(d[8..<12]) + "-" + String(d[12..<16]) + "-"
                + String(d[16..<20]) + "-" + String(d[20..<32])
        default: return nil
        }
    }

    /// The short form for display ("180d") when the UUID is on the Bluetooth base, else the full form.
    public static func short(_ uuid: String) -> String {
        guard let full = normalize(uuid), full.hasSuffix(baseSuffix) else { return uuid.lowercased() }
        let head = full.prefix(8)
        return head.hasPrefix("0000") ? String(head.dropFirst(4)) : String(head)
    }

    /// The 16-bit value of a UUID on the Bluetooth base ("0000xxxx-..."), else nil:
    /// how advertising data carries it (AD types 0x03, 0x16).
    public static func shortValue(_ uuid: String) -> UInt16? {
        guard let full = normalize(uuid), full.hasSuffix(baseSuffix), full.hasPrefix("0000") else { return nil }
        return UInt16(full.dropFirst(4).prefix(4), radix: 16)
    }

    /// The 16 bytes of a UUID, most significant first (advertising data carries them reversed).
    public static func bytes(_ uuid: String) -> [UInt8]? {
        guard let full = normalize(uuid) else { return nil }
        let digits = Array(full.filter { $0 != "-" })
        var result: [UInt8] = []
        for index in stride(from: 0, to: digits.count, by: 2) {
            guard let byte = UInt8(String(digits[index..<index + 2]), radix: 16) else { return nil }
            result.append(byte)
        }
        return result.count == 16 ? result : nil
    }

    /// Whether two spellings name the same UUID.
    public static func matches(_ lhs: String, _ rhs: String) -> Bool {
        guard let lhs = normalize(lhs), let rhs = normalize(rhs) else { return lhs.lowercased() == rhs.lowercased() }
        return lhs == rhs
    }
}
