/// Framing of the local protocol.
///
/// Every message is one frame: an 8-byte prefix (header length and body length,
/// both little-endian `UInt32`), a UTF-8 JSON object (the header, always with a
/// `"type"`), then the body as raw bytes. Control data stays readable JSON while
/// accessory and GATT payloads travel as bytes, never base64.
public struct Frame: Sendable, Equatable {
    /// The raw JSON header.
    public var header: [UInt8]
    /// The binary payload; empty for most messages.
    public var body: [UInt8]

    public init(header: [UInt8], body: [UInt8] = []) {
        self.header = header
        self.body = body
    }

    /// Size of the length prefix.
    public static let prefixSize = 8

    /// The frame as it goes on the wire.
    public func encoded() -> [UInt8] {
        var bytes = [UInt8]()
        bytes.reserveCapacity(Self.prefixSize + header.count + body.count)
        Self.appendLittleEndian(UInt32(header.count), to: &bytes)
        Self.appendLittleEndian(UInt32(body.count), to: &bytes)
        bytes.append(contentsOf: header)
        bytes.append(contentsOf: body)
        return bytes
    }

    static func appendLittleEndian(_ value: UInt32, to bytes: inout [UInt8]) {
        withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
    }
}

/// Upper bounds a receiver enforces before it allocates anything.
public struct FrameLimits: Sendable, Equatable, Codable {
    public var maxHeaderBytes: Int
    public var maxBodyBytes: Int

    public init(maxHeaderBytes: Int = 64 * 1024, maxBodyBytes: Int = 1024 * 1024) {
        self.maxHeaderBytes = maxHeaderBytes
        self.maxBodyBytes = maxBodyBytes
    }

    public static let `default` = FrameLimits()

    /// What a client accepts from the daemon: the header may be far larger
    /// than what the daemon accepts (the `apps` reply of a daemon with a
    /// thousand apps is half a megabyte); the daemon is the client's trusted
    /// peer, so the bound only guards against a broken stream.
    public static let fromDaemon = FrameLimits(maxHeaderBytes: 16 << 20)
}

/// Why a byte stream could not be split into frames. Either is fatal for the
/// connection: the stream can no longer be trusted to be in sync.
public enum FrameError: Error, Equatable, CustomStringConvertible {
    case headerTooLarge(Int, limit: Int)
    case bodyTooLarge(Int, limit: Int)
    case emptyHeader

    public var description: String {
        switch self {
        case let .headerTooLarge(size, limit): "frame header of \(size) bytes exceeds the limit of \(limit)"
        case let .bodyTooLarge(size, limit): "frame body of \(size) bytes exceeds the limit of \(limit)"
        case .emptyHeader: "frame has an empty header"
        }
    }
}

/// Incremental frame splitter: feed it whatever `read()` returned, take out
/// complete frames. Limits are checked on the prefix, before buffering the frame.
public struct FrameDecoder: Sendable {
    public let limits: FrameLimits
    private var buffer: [UInt8] = []
    private var start = 0

    public init(limits: FrameLimits = .default) {
        self.limits = limits
    }

    /// Bytes received but not yet part of a complete frame.
    public var pendingByteCount: Int { buffer.count - start }

    public mutating func append<C: Collection>(_ bytes: C) where C.Element == UInt8 {
        buffer.append(contentsOf: bytes)
    }

    public mutating func append(_ bytes: UnsafeRawBufferPointer) {
        buffer.append(contentsOf: bytes)
    }

    /// The next complete frame, or nil if more bytes are needed.
    public mutating func next() throws(FrameError) -> Frame? {
        guard pendingByteCount >= Frame.prefixSize else { return nil }
        let headerCount = Int(readLittleEndian(at: start))
        let bodyCount = Int(readLittleEndian(at: start + 4))
        guard headerCount > 0 else { throw .emptyHeader }
        guard headerCount <= limits.maxHeaderBytes else {
            throw .headerTooLarge(headerCount, limit: limits.maxHeaderBytes)
        }
        guard bodyCount <= limits.maxBodyBytes else {
            throw .bodyTooLarge(bodyCount, limit: limits.maxBodyBytes)
        }
        let total = Frame.prefixSize + headerCount + bodyCount
        guard pendingByteCount >= total else { return nil }
        let headerStart = start + Frame.prefixSize
        let bodyStart = headerStart + headerCount
        let frame = Frame(
            header: Array(buffer[headerStart..<bodyStart]),
            body: Array(buffer[bodyStart..<(bodyStart + bodyCount)])
        )
        start += total
        compactIfWorthwhile()
        return frame
    }

    private func readLittleEndian(at offset: Int) -> UInt32 {
        UInt32(buffer[offset]) | UInt32(buffer[offset + 1]) << 8
            | UInt32(buffer[offset + 2]) << 16 | UInt32(buffer[offset + 3]) << 24
    }

    /// Drops consumed bytes once they dominate the buffer, so a long-lived
    /// connection neither grows without bound nor copies on every frame.
    private mutating func compactIfWorthwhile() {
        if start == buffer.count {
            buffer.removeAll(keepingCapacity: true)
            start = 0
        } else if start > 64 * 1024 && start * 2 > buffer.count {
            buffer.removeFirst(start)
            start = 0
        }
    }
}
