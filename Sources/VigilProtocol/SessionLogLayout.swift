/// The layout of a session log: the file vigild reads a session's device bytes
/// into and its app reads them from, in place (docs/protocol.md, "Session
/// logs"). One page of header, then a ring of `capacity` bytes.
///
/// A session's bytes are numbered from 0 (the stream offset); byte `n` lives
/// at file offset `headerSize + n % capacity`. Only the daemon writes. A
/// `session.data` event names a range (`offset`, `length`) that the daemon
/// wrote before sending the event and does not overwrite before the app
/// acknowledges the event. The header's counters are for the next daemon
/// after a crash, not for apps: an app reads only the ranges events name.
///
/// All integers are little-endian.
public enum SessionLogLayout {
    public static let magic: [UInt8] = Array("VIGILLOG".utf8)
    public static let version: UInt32 = 1
    /// One page: the ring starts page-aligned, so released pages are whole.
    public static let headerSize = 4096

    /// Header fields, by byte offset.
    public enum Field: Int, Sendable {
        /// UInt32 (after the 8 magic bytes).
        case version = 8
        /// UInt64: bytes in the ring.
        case capacity = 16
        /// UInt64: stream offset after the last byte read from the device.
        case written = 24
        /// UInt64: stream offset after the last byte the app acknowledged.
        case acknowledged = 32
        /// UInt64: while a read(2) into the ring is in progress, `written`
        /// at its start plus one; else 0. A daemon killed in that moment
        /// cannot know whether the device gave bytes it never counted; if
        /// `written` still equals the mark minus one, the next daemon reports
        /// possible loss.
        case readInProgress = 40
    }

    public static func fileSize(capacity: Int) -> Int { headerSize + capacity }

    public static func load(_ field: Field, from base: UnsafeRawPointer) -> UInt64 {
        UInt64(littleEndian: base.loadUnaligned(fromByteOffset: field.rawValue, as: UInt64.self))
    }

    public static func store(_ value: UInt64, _ field: Field, to base: UnsafeMutableRawPointer) {
        base.storeBytes(of: value.littleEndian, toByteOffset: field.rawValue, as: UInt64.self)
    }

    /// Writes a fresh header for an empty ring.
    public static func format(_ base: UnsafeMutableRawPointer, capacity: Int) {
        base.initializeMemory(as: UInt8.self, repeating: 0, count: headerSize)
        for (index, byte) in magic.enumerated() { base.storeBytes(of: byte, toByteOffset: index, as: UInt8.self) }
        base.storeBytes(of: version.littleEndian, toByteOffset: Field.version.rawValue, as: UInt32.self)
        store(UInt64(capacity), .capacity, to: base)
    }

    /// Why a mapped file of `size` bytes is not a usable session log; nil if it is.
    public static func problem(in base: UnsafeRawPointer, size: Int) -> String? {
        guard size > headerSize else { return "shorter than its header (\(size) bytes)" }
        guard (0..<magic.count).allSatisfy({ base.load(fromByteOffset: $0, as: UInt8.self) == magic[$0] }) else {
            return "not a session log (bad magic)"
        }
        let version = UInt32(littleEndian: base.loadUnaligned(fromByteOffset: Field.version.rawValue, as: UInt32.self))
        guard version == Self.version else { return "session log version \(version); this build reads \(Self.version)" }
        let capacity = load(.capacity, from: base)
        guard capacity > 0, capacity <= UInt64(size - headerSize) else {
            return "capacity \(capacity) does not fit the file (\(size) bytes)"
        }
        let written = load(.written, from: base), acknowledged = load(.acknowledged, from: base)
        guard acknowledged <= written, written - acknowledged <= capacity else {
            return "counters out of range (written \(written), acknowledged \(acknowledged), capacity \(capacity))"
        }
        return nil
    }

    /// Copies the stream range [offset, offset + length) out of a mapped log,
    /// in up to two pieces where it wraps. The caller checked the header
    /// (`problem`) and that `length <= capacity`.
    public static func copy(from base: UnsafeRawPointer, offset: UInt64, length: Int) -> [UInt8] {
        let capacity = Int(load(.capacity, from: base))
        precondition(length <= capacity, "a range longer than the ring")
        guard length > 0 else { return [] }
        let ring = base + headerSize
        let start = Int(offset % UInt64(capacity))
        let first = min(length, capacity - start)
        return [UInt8](unsafeUninitializedCapacity: length) { buffer, count in
            let target = UnsafeMutableRawBufferPointer(buffer)
            target.baseAddress!.copyMemory(from: ring + start, byteCount: first)
            if first < length { (target.baseAddress! + first).copyMemory(from: ring, byteCount: length - first) }
            count = length
        }
    }
}
