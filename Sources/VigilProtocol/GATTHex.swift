/// Bytes as the protocol spells them in JSON (definitions, advertisement and
/// manufacturer data): lowercase hex, two digits per byte. One place for both
/// the daemon and the clients.
public enum GATTHex {
    public static func string(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef")
        var text = ""
        text.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0f)])
        }
        return text
    }

    /// Bytes from hex as people write it: `0x0102`, `01 02`, `01:02`, `0102`; nil if it is not hex.
    public static func bytes(_ text: String) -> [UInt8]? {
        var digits = Substring(text.lowercased())
        if digits.hasPrefix("0x") { digits.removeFirst(2) }
        let clean = digits.filter { $0 != " " && $0 != ":" && $0 != "-" && $0 != "\t" }
        guard clean.count % 2 == 0, clean.allSatisfy(\.isHexDigit) else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(clean.count / 2)
        var index = clean.startIndex
        while index < clean.endIndex {
            let next = clean.index(index, offsetBy: 2)
            guard let byte = UInt8(clean[index..<next], radix: 16) else { return nil }
            bytes.append(byte)
            index = next
        }
        return bytes
    }
}
