import FoundationEssentials
import Glibc
import VigilSystem

/// A durable FIFO of MQTT messages (docs/fleet.md). Two of them: the
/// outbox (messages apps publish, kept until the broker has them) and the
/// held messages (from the broker, for apps whose event queue is full, kept
/// until the queue has room).
///
/// One file per message in `directory`, named by its sequence number (20
/// digits, so names sort in order), written to a temporary name and renamed;
/// with `sync` (vigild's `durability = "power"`) fdatasync'd before the
/// rename and the folder fsync'd after. A message is in the spool once
/// `append` returns, and leaves it on `remove` (the outbox: on the broker's
/// PUBACK). Bounded by a count and a size: past either, `append` refuses and
/// counts it (nothing already accepted is dropped).
public final class MQTTSpool {
    public struct Entry: Sendable, Equatable {
        public var seq: UInt64
        public var app: String
        public var topic: String
        public var payload: [UInt8]
        /// Bit 0: retained, bit 1: duplicate (held messages; 0 in the outbox).
        public var flags: UInt8 = 0
        public var size: Int { payload.count + topic.utf8.count + app.utf8.count }
    }

    public enum Refusal: Error, Sendable, Equatable, CustomStringConvertible {
        case full(String)
        case io(String)
        public var description: String {
            switch self {
            case .full(let text), .io(let text): text
            }
        }
    }

    /// What it holds, for messages ("outbox", "held messages").
    public let name: String
    /// Its crash points' prefix (docs/reliability.md): `PREFIX.append`, the
    /// message's file renamed into place; `PREFIX.remove`, its unlink.
    public let crashPoint: String
    public let directory: String
    public let sync: Bool
    public let messageLimit: Int
    public let byteLimit: Int
    /// Oldest first.
    public private(set) var entries: [Entry] = []
    public private(set) var bytes = 0
    /// Since this daemon started: refused at the bound, and delivered.
    public private(set) var refused = 0
    public private(set) var delivered = 0
    private var nextSeq: UInt64
    /// Files that could not be read at start (moved aside), for the log.
    public private(set) var unreadable: [String] = []

    public init(
        name: String, crashPoint: String = "mqtt.spool", directory: String, sync: Bool, messageLimit: Int, byteLimit: Int
    ) throws {
        self.name = name
        self.crashPoint = crashPoint
        self.directory = directory
        self.sync = sync
        self.messageLimit = messageLimit
        self.byteLimit = byteLimit
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var last: UInt64 = 0
        for name in try FileManager.default.contentsOfDirectory(atPath: directory).sorted() {
            let path = directory + "/" + name
            if name.hasSuffix(".tmp") {
                unlink(path)
                continue
            }
            guard let seq = UInt64(name), let entry = Self.read(path, seq: seq) else {
                if !name.hasSuffix(".unreadable") {
                    rename(path, path + ".unreadable")
                    unreadable.append(name)
                }
                continue
            }
            entries.append(entry)
            bytes += entry.size
            last = seq
        }
        // Never reuse a number, even once the folder is empty: not below the
        // clock's microseconds either.
        nextSeq = max(last + 1, UInt64(Date().timeIntervalSince1970 * 1_000_000))
    }

    /// Stores a message durably; refuses past the bounds.
    public func append(app: String, topic: String, payload: [UInt8], flags: UInt8 = 0) throws(Refusal) -> Entry {
        let entry = Entry(seq: nextSeq, app: app, topic: topic, payload: payload, flags: flags)
        if entries.count + 1 > messageLimit || bytes + entry.size > byteLimit {
            refused += 1
            throw .full(
                "the MQTT \(name) is full (\(entries.count) messages, \(bytes) bytes; limits \(messageLimit) messages, \(byteLimit) bytes); retry later")
        }
        var record: [UInt8] = []
        func put(_ value: UInt32) { withUnsafeBytes(of: value.littleEndian) { record += $0 } }
        put(UInt32(app.utf8.count))
        record += app.utf8
        put(UInt32(topic.utf8.count))
        record += topic.utf8
        record.append(flags)
        record += payload
        let path = directory + "/" + Self.name(entry.seq)
        do {
            CrashPoint.reach(crashPoint + ".append", .before)
            try write(record, to: path)
            CrashPoint.reach(crashPoint + ".append", .after)
        } catch {
            throw .io("cannot write \(path): \(error)")
        }
        nextSeq += 1
        entries.append(entry)
        bytes += entry.size
        return entry
    }

    /// The broker has the message: forget it.
    public func remove(_ seq: UInt64) {
        guard let index = entries.firstIndex(where: { $0.seq == seq }) else { return }
        bytes -= entries[index].size
        entries.remove(at: index)
        delivered += 1
        CrashPoint.reach(crashPoint + ".remove", .before)
        unlink(directory + "/" + Self.name(seq))
        CrashPoint.reach(crashPoint + ".remove", .after)
    }

    static func name(_ seq: UInt64) -> String {
        let digits = String(seq)
        return String(repeating: "0", count: max(0, 20 - digits.count)) + digits
    }

    private func write(_ record: [UInt8], to path: String) throws {
        let temporary = path + ".tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        var written = 0
        while written < record.count {
            let count = record.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + written, $0.count - written) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else {
                let code = errno
                close(fd)
                unlink(temporary)
                throw POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO)
            }
            written += count
        }
        if sync && fdatasync(fd) != 0 {
            let code = errno
            close(fd)
            unlink(temporary)
            throw POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO)
        }
        close(fd)
        guard rename(temporary, path) == 0 else {
            let code = errno
            unlink(temporary)
            throw POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO)
        }
        if sync {
            let folder = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            if folder >= 0 {
                defer { close(folder) }
                guard fsync(folder) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
            }
        }
    }

    private static func read(_ path: String, seq: UInt64) -> Entry? {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        let bytes = [UInt8](data)
        var offset = 0
        func field() -> String? {
            guard offset + 4 <= bytes.count else { return nil }
            let length = Int(UInt32(bytes[offset]) | UInt32(bytes[offset + 1]) << 8 | UInt32(bytes[offset + 2]) << 16 | UInt32(bytes[offset + 3]) << 24)
            offset += 4
            guard length <= bytes.count - offset else { return nil }
            defer { offset += length }
            return String(validating: bytes[offset..<offset + length], as: UTF8.self)
        }
        guard let app = field(), let topic = field(), offset < bytes.count else { return nil }
        let flags = bytes[offset]
        return Entry(seq: seq, app: app, topic: topic, payload: Array(bytes[(offset + 1)...]), flags: flags)
    }
}
