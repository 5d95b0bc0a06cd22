/// Record framing of a session whose transport keeps message boundaries (a
/// hidraw node: one input report per record). In the session log, and so in
/// a `session.data` event's bytes and a control client's `sessionData`
/// frame, each record is its length (2 bytes, little-endian) followed by
/// its bytes: the `u16le` framing of `ble.notification` batches. The daemon
/// writes a record whole or not at all, and an event names whole records
/// only; such an event carries `"framing": "u16le"` (docs/protocol.md,
/// "HID accessories").
public enum SessionRecords {
    public static let headerSize = 2
    /// The event attribute's value.
    public static let framing = "u16le"
    /// The longest record: 0xFFFF is kept back, as in notification batches.
    public static let maxLength = 0xFFFE

    /// One record with its length in front.
    public static func frame(_ record: some Collection<UInt8>) -> [UInt8] {
        precondition(record.count <= maxLength, "a record longer than \(maxLength) bytes")
        return [UInt8(record.count & 0xff), UInt8(record.count >> 8)] + record
    }

    /// The records of a run of framed bytes, in order. Bytes that end inside
    /// a record are an error (an event always names whole records).
    public static func split(_ bytes: [UInt8]) throws(ProtocolError) -> [[UInt8]] {
        var records: [[UInt8]] = []
        var index = 0
        while index < bytes.count {
            guard bytes.count - index >= headerSize else {
                throw ProtocolError(.invalidArgument, "session records: \(bytes.count - index) byte(s) left, shorter than a record's length")
            }
            let length = Int(bytes[index]) | Int(bytes[index + 1]) << 8
            index += headerSize
            guard bytes.count - index >= length else {
                throw ProtocolError(.invalidArgument, "session records: a record of \(length) bytes with only \(bytes.count - index) left")
            }
            records.append(Array(bytes[index..<index + length]))
            index += length
        }
        return records
    }
}
