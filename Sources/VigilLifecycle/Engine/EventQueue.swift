import FoundationEssentials
import Glibc
import VigilProtocol

/// An event waiting for, or delivered to and not yet acknowledged by, an app.
public struct QueuedEvent: Sendable, Equatable, Codable {
    public var seq: UInt64
    public var kind: String
    public var attributes: [String: JSONValue]
    public var payload: [UInt8]
    /// The background mode an app needs to be woken for it; nil wakes every app.
    public var wakeMode: BackgroundMode?
    /// Whether some process of the app was sent this event already.
    public var everSent = false
    /// Events of one stream (e.g. one session's data) go one at a time: the next
    /// is sent once the app acknowledges the one before, and grows by merging
    /// meanwhile. A fast stream thus becomes a few large events, paced by the
    /// app, instead of one per read. Nil: sent as soon as it may be.
    public var stream: String?

    public init(
        kind: String, attributes: [String: JSONValue] = [:], payload: [UInt8] = [], wakeMode: BackgroundMode? = nil,
        stream: String? = nil
    ) {
        self.seq = 0
        self.kind = kind
        self.attributes = attributes
        self.payload = payload
        self.wakeMode = wakeMode
        self.stream = stream
    }

    // The state file stores payloads as base64 (`Data`), not as arrays of
    // numbers: a session's buffered megabyte stays about a megabyte on disk.
    enum CodingKeys: String, CodingKey { case seq, kind, attributes, payload, wakeMode, everSent, stream }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        seq = try container.decode(UInt64.self, forKey: .seq)
        kind = try container.decode(String.self, forKey: .kind)
        attributes = try container.decode([String: JSONValue].self, forKey: .attributes)
        payload = [UInt8](try container.decode(Data.self, forKey: .payload))
        wakeMode = try container.decodeIfPresent(BackgroundMode.self, forKey: .wakeMode)
        everSent = try container.decode(Bool.self, forKey: .everSent)
        stream = try container.decodeIfPresent(String.self, forKey: .stream)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(seq, forKey: .seq)
        try container.encode(kind, forKey: .kind)
        try container.encode(attributes, forKey: .attributes)
        try container.encode(Data(payload), forKey: .payload)
        try container.encodeIfPresent(wakeMode, forKey: .wakeMode)
        try container.encode(everSent, forKey: .everSent)
        try container.encodeIfPresent(stream, forKey: .stream)
    }
}

/// An app's bounded, ordered event queue with cumulative acknowledgement.
///
/// Events stay here, in daemon memory rather than socket buffers, from arrival
/// until the app acknowledges them; `sentCount` leading events have gone to the
/// current connection. A new connection starts again from the first
/// unacknowledged event, which is how a crash mid-processing is redelivered.
public struct EventQueue: Sendable {
    public private(set) var events: [QueuedEvent] = []
    public private(set) var sentCount = 0
    public private(set) var nextSeq: UInt64 = 1
    public let limit: Int
    /// Events refused at the bound and not yet reported to the app.
    public private(set) var unreportedDrops = 0
    public private(set) var firstDroppedKind: String?
    public private(set) var totalDropped = 0
    /// What changed since the owner last took the changes: the daemon journals
    /// them (see `JournalRecord`) before it relies on them.
    public private(set) var changes: [QueueChange] = []

    public init(limit: Int, nextSeq: UInt64 = 1) {
        self.limit = limit
        self.nextSeq = nextSeq
    }

    /// A queue saved by an earlier daemon. Nothing counts as sent to a connection
    /// yet; events sent before keep `everSent`, so they go out as redelivered.
    public init(limit: Int, restoring saved: SavedQueue) {
        self.limit = limit
        events = saved.events
        nextSeq = max(saved.nextSeq, (saved.events.last?.seq ?? 0) + 1)
        totalDropped = saved.totalDropped
        unreportedDrops = saved.unreportedDrops
        firstDroppedKind = saved.firstDroppedKind
    }

    public var saved: SavedQueue {
        SavedQueue(
            events: events, nextSeq: nextSeq, totalDropped: totalDropped, unreportedDrops: unreportedDrops,
            firstDroppedKind: firstDroppedKind)
    }

    public var isFull: Bool { events.count >= limit }
    public var unsent: ArraySlice<QueuedEvent> { events[sentCount...] }
    public var unacknowledgedCount: Int { sentCount }
    public var queuedCount: Int { events.count - sentCount }

    /// Takes what changed since the last call, oldest first.
    public mutating func takeChanges() -> [QueueChange] {
        defer { changes = [] }
        return changes
    }

    /// Appends `event` and returns its sequence number, or nil at the bound.
    public mutating func append(_ event: QueuedEvent) -> UInt64? {
        guard !isFull else { return nil }
        var event = event
        event.seq = nextSeq
        nextSeq += 1
        events.append(event)
        changes.append(.enqueued(event))
        return event.seq
    }

    /// Appends `bytes` to the payload of the last event if it is still unsent
    /// and `matches` it (a burst of data becomes one event); false otherwise.
    public mutating func mergeIntoLastUnsent(_ bytes: [UInt8], if matches: (QueuedEvent) -> Bool) -> UInt64? {
        let last = events.count - 1
        guard sentCount <= last, matches(events[last]) else { return nil }
        // In place: holding a copy of the event here would copy the whole
        // payload on every merge (quadratic for a long burst).
        changes.append(.merged(seq: events[last].seq, offset: events[last].payload.count, bytes: bytes))
        events[last].payload.append(contentsOf: bytes)
        return events[last].seq
    }

    /// Whether an event of `stream` was sent and not yet acknowledged.
    public func hasInFlight(stream: String) -> Bool {
        events[..<sentCount].contains { $0.stream == stream }
    }

    /// Removes unsent events that match; returns them. Used to coalesce (a connect
    /// and a disconnect of the same connection cancel out while the app sleeps).
    public mutating func withdrawUnsent(where matches: (QueuedEvent) -> Bool) -> [QueuedEvent] {
        let withdrawn = events[sentCount...].filter(matches)
        guard !withdrawn.isEmpty else { return [] }
        let kept = events[sentCount...].filter { !matches($0) }
        events.removeSubrange(sentCount...)
        events.append(contentsOf: kept)
        changes.append(.withdrawn(withdrawn.map(\.seq)))
        return withdrawn
    }

    /// Counts an event that could be neither held back nor queued.
    public mutating func countDrop(kind: String) {
        if unreportedDrops == 0 { firstDroppedKind = kind }
        unreportedDrops += 1
        totalDropped += 1
        changes.append(dropCounters)
    }

    private var dropCounters: QueueChange {
        .drops(unreported: unreportedDrops, firstKind: firstDroppedKind, total: totalDropped)
    }

    /// Queues the `overflow` report once there is room for it.
    public mutating func appendOverflowReportIfPossible() {
        guard unreportedDrops > 0, !isFull else { return }
        let report = QueuedEvent(
            kind: "overflow",
            attributes: ["dropped": .number(Double(unreportedDrops)), "firstDroppedKind": .string(firstDroppedKind ?? "")])
        _ = append(report)
        unreportedDrops = 0
        firstDroppedKind = nil
        changes.append(dropCounters)
    }

    /// Marks the next unsent event as sent and returns it.
    public mutating func takeNextUnsent() -> (event: QueuedEvent, redelivered: Bool)? {
        guard sentCount < events.count else { return nil }
        let redelivered = events[sentCount].everSent
        if !redelivered { changes.append(.sent(upTo: events[sentCount].seq)) }
        events[sentCount].everSent = true
        sentCount += 1
        return (events[sentCount - 1], redelivered)
    }

    public func peekNextUnsent() -> QueuedEvent? {
        sentCount < events.count ? events[sentCount] : nil
    }

    /// Drops every event up to and including `seq`; returns how many.
    @discardableResult
    public mutating func acknowledge(upTo seq: UInt64) -> Int {
        let count = events.prefix { $0.seq <= seq }.count
        let acknowledged = min(count, sentCount)  // never ack what was not sent
        if acknowledged > 0 { changes.append(.acknowledged(upTo: events[acknowledged - 1].seq)) }
        events.removeFirst(acknowledged)
        sentCount -= acknowledged
        return acknowledged
    }

    /// The connection is gone: whatever was sent and not acknowledged goes again.
    public mutating func rewind() {
        sentCount = 0
    }
}

/// A change to what of a queue outlives the daemon (see `JournalRecord`).
public enum QueueChange: Sendable, Equatable {
    case enqueued(QueuedEvent)
    case merged(seq: UInt64, offset: Int, bytes: [UInt8])
    case sent(upTo: UInt64)
    case acknowledged(upTo: UInt64)
    case withdrawn([UInt64])
    case drops(unreported: Int, firstKind: String?, total: Int)

    func record(app: String) -> JournalRecord {
        switch self {
        case let .enqueued(event): .enqueued(app: app, event: event)
        case let .merged(seq, offset, bytes): .merged(app: app, seq: seq, offset: offset, bytes: bytes)
        case let .sent(seq): .sent(app: app, upTo: seq)
        case let .acknowledged(seq): .acknowledged(app: app, upTo: seq)
        case let .withdrawn(seqs): .withdrawn(app: app, seqs: seqs)
        case let .drops(unreported, firstKind, total): .drops(app: app, unreported: unreported, firstKind: firstKind, total: total)
        }
    }
}

/// What of an event queue outlives the daemon process.
public struct SavedQueue: Sendable, Codable, Equatable {
    public var events: [QueuedEvent]
    public var nextSeq: UInt64
    public var totalDropped: Int
    public var unreportedDrops: Int
    public var firstDroppedKind: String?
}
