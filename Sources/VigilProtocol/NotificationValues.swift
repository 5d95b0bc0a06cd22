/// How a `ble.notification` event for an app carries its values: one or many,
/// so that a fast notifier's values cost one event per batch, not one per value.
///
/// An event with the attribute `framing: "u16le"` has a body of records, in
/// the order the values arrived:
///
/// - `u16le n` (n ≤ 0xFFFE), then n bytes: a value of the characteristic the
///   event's attributes name (`peripheral`, `service`, `characteristic`);
/// - `u16le 0xFFFF`, `u16le m`, m bytes of UTF-8 `peripheral service
///   characteristic`, and ` instance` when it is not 0 (separated by one
///   space), then a value record as above:
///   one value of that other characteristic.
///
/// An event without `framing` (queued by a daemon older than batching, and
/// every `blePush` to control clients) carries a single value, its whole body.
/// docs/protocol.md, "Bluetooth LE: central", is the reference.
public enum NotificationValues {
    /// The attribute that says how the body is framed, and its one value.
    public static let framingAttribute = "framing"
    public static let framing = "u16le"
    /// The length that introduces a record naming another characteristic.
    static let otherCharacteristic: UInt16 = 0xFFFF
    /// The longest value a record holds (an ATT value is at most 512 bytes).
    public static let maxValueLength = 0xFFFE

    /// The attributes of an event whose first value is of `path`.
    public static func attributes(of path: CharacteristicPath) -> [String: JSONValue] {
        var attributes = BluetoothEventContent.notification(path).attributes
        attributes[framingAttribute] = .string(framing)
        return attributes
    }

    /// Whether an event's attributes say its body is framed (whatever the framing).
    public static func isFramed(_ attributes: [String: JSONValue]) -> Bool {
        attributes[framingAttribute] != nil
    }

    /// The record of one value of `path` in an event whose attributes name `eventPath`.
    /// Values longer than `maxValueLength` are cut (no ATT value is).
    public static func record(_ value: [UInt8], of path: CharacteristicPath, in eventPath: CharacteristicPath) -> [UInt8] {
        var bytes: [UInt8] = []
        append(value, of: path, in: eventPath, to: &bytes)
        return bytes
    }

    public static func append(_ value: [UInt8], of path: CharacteristicPath, in eventPath: CharacteristicPath, to bytes: inout [UInt8]) {
        if path != eventPath {
            let name = "\(path.peripheral) \(path.service) \(path.characteristic)" + (path.instance == 0 ? "" : " \(path.instance)")
            let text = Array(name.utf8)
            bytes.reserveCapacity(bytes.count + 6 + text.count + value.count)
            appendLength(Int(otherCharacteristic), to: &bytes)
            appendLength(min(text.count, maxValueLength), to: &bytes)
            bytes.append(contentsOf: text.prefix(maxValueLength))
        }
        let count = min(value.count, maxValueLength)
        appendLength(count, to: &bytes)
        bytes.append(contentsOf: value.prefix(count))
    }

    private static func appendLength(_ length: Int, to bytes: inout [UInt8]) {
        bytes.append(UInt8(truncatingIfNeeded: length))
        bytes.append(UInt8(truncatingIfNeeded: length >> 8))
    }

    /// The values of an event, in order, with the characteristic of each.
    /// An unframed event is one value, its body. Throws `invalidArgument` for
    /// a framing this version does not know or a body that is not whole records.
    public static func decode(
        _ body: [UInt8], attributes: [String: JSONValue], path eventPath: CharacteristicPath
    ) throws(ProtocolError) -> [(path: CharacteristicPath, value: [UInt8])] {
        guard let framing = attributes[framingAttribute] else { return [(eventPath, body)] }
        guard framing == .string(Self.framing) else {
            throw ProtocolError(.invalidArgument, "ble.notification: unknown framing \(framing)")
        }
        var values: [(path: CharacteristicPath, value: [UInt8])] = []
        var offset = 0
        func length() throws(ProtocolError) -> Int {
            guard body.count - offset >= 2 else {
                throw ProtocolError(.invalidArgument, "ble.notification: a record is cut short at byte \(offset) of \(body.count)")
            }
            defer { offset += 2 }
            return Int(body[offset]) | Int(body[offset + 1]) << 8
        }
        func bytes(_ count: Int) throws(ProtocolError) -> ArraySlice<UInt8> {
            guard body.count - offset >= count else {
                throw ProtocolError(.invalidArgument, "ble.notification: a record of \(count) bytes is cut short at byte \(offset) of \(body.count)")
            }
            defer { offset += count }
            return body[offset..<offset + count]
        }
        while offset < body.count {
            var path = eventPath
            var count = try length()
            if count == Int(otherCharacteristic) {
                let text = String(decoding: try bytes(try length()), as: UTF8.self)
                let parts = text.split(separator: " ", omittingEmptySubsequences: false)
                let instance = parts.count == 4 ? Int(parts[3]).flatMap { $0 >= 0 && $0 < 65536 ? $0 : nil } : 0
                guard parts.count == 3 || parts.count == 4, !parts.contains(where: \.isEmpty), let instance else {
                    throw ProtocolError(.invalidArgument, "ble.notification: '\(text)' does not name a characteristic")
                }
                path = CharacteristicPath(
                    peripheral: String(parts[0]), service: String(parts[1]), characteristic: String(parts[2]), instance: instance)
                count = try length()
                guard count != Int(otherCharacteristic) else {
                    throw ProtocolError(.invalidArgument, "ble.notification: two characteristic records in a row at byte \(offset - 2)")
                }
            }
            values.append((path, Array(try bytes(count))))
        }
        return values
    }
}
