import FoundationEssentials
import Glibc
import VigilProtocol

/// One process, told apart from a later one that reuses its pid: its pid and
/// its start time (`/proc/PID/stat` field 22, clock ticks since boot), as
/// `processes.json` records a process for adoption.
public struct ProcessIdentity: Sendable, Equatable, Hashable, Codable, CustomStringConvertible {
    public var pid: Int32
    public var startTime: UInt64

    public init(pid: Int32, startTime: UInt64) {
        self.pid = pid
        self.startTime = startTime
    }

    public var description: String { "pid \(pid) started at tick \(startTime)" }
}

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
    /// The process this event was last sent to with its current seq (nil:
    /// none known: never sent, sent before the daemon recorded it, or since
    /// renumbered). That process may acknowledge it on a later connection,
    /// even of a later daemon (docs/lifecycle.md, "Acknowledgement across
    /// connections").
    public var sentTo: ProcessIdentity?
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

    /// The source whose order this event keeps (docs/lifecycle.md, "Order"):
    /// events of one source reach the app in the order they were queued, and
    /// one held back (for the foreground, or behind its stream's event in
    /// flight) holds back only the later events of its source. Derived from
    /// the kind and attributes, so saved and journaled events need no field.
    ///
    /// - `session/ID`: everything about one session (`session.*`, the
    ///   `ble.l2cap.incoming`/`reopened` of an L2CAP channel's session);
    /// - `accessory`: `accessory.connected`/`disconnected`;
    /// - `ble.central`: the central role (`ble.state`, `ble.discovered`,
    ///   `ble.connected`, `ble.disconnected`, `ble.notification`; one source,
    ///   as one CBCentralManager's queue, since a notification batch holds
    ///   values of several peripherals);
    /// - `ble.peripheral`: the peripheral role (`ble.peripheral.*`,
    ///   `ble.l2cap.unpublished`, and `ble.state` sent by that role's mode);
    /// - `mqtt`, `refresh` (`app.refresh`), `overflow`;
    /// - `wake`: every other kind (`test`, or a kind of the caller's own).
    public var source: String {
        if kind.hasPrefix("session.") || kind == "ble.l2cap.incoming" || kind == "ble.l2cap.reopened" {
            if case let .number(session)? = attributes["session"], session.isFinite, abs(session) < 1e15 {
                return "session/\(Int(session))"
            }
            return "session"
        }
        if kind.hasPrefix("accessory.") { return "accessory" }
        if kind.hasPrefix("ble.peripheral.") || kind == "ble.l2cap.unpublished" { return "ble.peripheral" }
        if kind == "ble.state" { return wakeMode == .bluetoothPeripheral ? "ble.peripheral" : "ble.central" }
        if kind.hasPrefix("ble.") { return "ble.central" }
        if kind.hasPrefix("mqtt.") { return "mqtt" }
        if kind == "app.refresh" { return "refresh" }
        if kind == "overflow" { return "overflow" }
        return "wake"
    }

    // The state file stores payloads as base64 (`Data`), not as arrays of
    // numbers: a session's buffered megabyte stays about a megabyte on disk.
    enum CodingKeys: String, CodingKey { case seq, kind, attributes, payload, wakeMode, everSent, sentTo, stream }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        seq = try container.decode(UInt64.self, forKey: .seq)
        kind = try container.decode(String.self, forKey: .kind)
        attributes = try container.decode([String: JSONValue].self, forKey: .attributes)
        payload = [UInt8](try container.decode(Data.self, forKey: .payload))
        wakeMode = try container.decodeIfPresent(BackgroundMode.self, forKey: .wakeMode)
        everSent = try container.decode(Bool.self, forKey: .everSent)
        sentTo = try container.decodeIfPresent(ProcessIdentity.self, forKey: .sentTo)
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
        try container.encodeIfPresent(sentTo, forKey: .sentTo)
        try container.encodeIfPresent(stream, forKey: .stream)
    }
}

/// An app's bounded event queue, ordered per source, with cumulative
/// acknowledgement.
///
/// Events stay here, in daemon memory rather than socket buffers, from arrival
/// until the app acknowledges them. The first `sentCount` events have gone to
/// the current connection, in the order sent, which is increasing `seq`; the
/// rest wait, in `seq` order. Events of one source go in `seq` order; an
/// event held back holds back only its source, so a later event of another
/// source may go first. A held event that goes out after a later one was
/// sent on the same connection is given a new seq (`renumbered`, with the
/// rest of its source's waiting events): the seqs a connection sees always
/// increase, so "acknowledge up to seq" keeps its meaning, and never covers
/// an event the acknowledging process was not sent (on this connection, or
/// with that seq on an earlier one of the same process: `sentTo`). A new
/// connection starts again from the first unacknowledged event, which is
/// how a crash mid-processing is redelivered.
public struct EventQueue: Sendable {
    public private(set) var events: [QueuedEvent] = []
    public private(set) var sentCount = 0
    public private(set) var nextSeq: UInt64 = 1
    /// The highest seq sent to the current connection (0: none yet).
    public private(set) var highestSent: UInt64 = 0
    /// The process at the other end of the current connection, when known:
    /// recorded with each event sent to it (`QueuedEvent.sentTo`).
    public private(set) var receiver: ProcessIdentity?
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
        events = saved.events.sorted { $0.seq < $1.seq }
        nextSeq = max(saved.nextSeq, (saved.events.last?.seq ?? 0) + 1)
        totalDropped = saved.totalDropped
        unreportedDrops = saved.unreportedDrops
        firstDroppedKind = saved.firstDroppedKind
    }

    public var saved: SavedQueue {
        SavedQueue(
            events: sentCount == 0 ? events : events.sorted { $0.seq < $1.seq }, nextSeq: nextSeq, totalDropped: totalDropped, unreportedDrops: unreportedDrops,
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
        return take(at: sentCount)
    }

    public func peekNextUnsent() -> QueuedEvent? {
        sentCount < events.count ? events[sentCount] : nil
    }

    /// The waiting events that may be sent now, by index, in `seq` order: per
    /// source, those before the first that `mayReceive` refuses or whose
    /// stream has an event in flight.
    public func sendable(mayReceive: (QueuedEvent) -> Bool) -> [Int] {
        guard sentCount < events.count else { return [] }
        var blocked: [String] = []
        var result: [Int] = []
        for index in sentCount..<events.count {
            let event = events[index]
            let source = event.source
            if blocked.contains(source) { continue }
            if !mayReceive(event) || (event.stream.map(hasInFlight(stream:)) ?? false) {
                blocked.append(source)
                continue
            }
            result.append(index)
        }
        return result
    }

    /// Marks as sent, in `seq` order, every waiting event that may be sent
    /// now (`sendable`), and returns them: per source, up to the first that
    /// `mayReceive` refuses or whose stream has an event in flight (one
    /// taken here counts).
    public mutating func takeSendable(mayReceive: (QueuedEvent) -> Bool) -> [(event: QueuedEvent, redelivered: Bool)] {
        var taken: [(event: QueuedEvent, redelivered: Bool)] = []
        var blocked: [String] = []
        var index = sentCount
        while index < events.count {
            let event = events[index]
            let source = event.source
            if blocked.contains(source) {
                index += 1
                continue
            }
            if !mayReceive(event) || (event.stream.map(hasInFlight(stream:)) ?? false) {
                blocked.append(source)
                index += 1
                continue
            }
            let renumbers = event.seq < highestSent
            taken.append(take(at: index))
            // Taken events move to the sent ones, before `index`: the next
            // candidate is at `index + 1`, unless renumbering moved events.
            index = renumbers ? sentCount : index + 1
        }
        return taken
    }

    /// The first waiting event that holds back its source because
    /// `mayReceive` refuses it, and is ahead of `event` in `event`'s source;
    /// nil when `event` is not held back that way.
    public func heldAhead(of event: QueuedEvent, mayReceive: (QueuedEvent) -> Bool) -> QueuedEvent? {
        let source = event.source
        for index in sentCount..<events.count where events[index].seq < event.seq && events[index].source == source {
            if !mayReceive(events[index]) { return events[index] }
        }
        return nil
    }

    /// The first waiting event that `mayReceive` accepts and that nothing of
    /// its own source holds back (streams aside: after a rewind none is in flight).
    public func firstDeliverable(mayReceive: (QueuedEvent) -> Bool) -> QueuedEvent? {
        guard sentCount < events.count else { return nil }
        var blocked: [String] = []
        for index in sentCount..<events.count {
            let event = events[index]
            let source = event.source
            if blocked.contains(source) { continue }
            if mayReceive(event) { return event }
            blocked.append(source)
        }
        return nil
    }

    /// Marks the waiting event at `index` as sent (it moves to the end of the
    /// sent events) and returns it. If the connection was sent a higher seq
    /// already, it and the rest of its source's waiting events get new seqs
    /// first (see the type's comment).
    public mutating func take(at index: Int) -> (event: QueuedEvent, redelivered: Bool) {
        precondition(index >= sentCount && index < events.count, "take(at:) a waiting event")
        var index = index
        if events[index].seq < highestSent { index = renumberSource(from: index) }
        var event = events.remove(at: index)
        let redelivered = event.everSent
        if !redelivered || event.sentTo != receiver {
            // Cumulative where that is exact: every waiting event below it
            // was sent to this same process already (replay marks all below).
            let below = events[sentCount...].contains { $0.seq < event.seq && !($0.everSent && $0.sentTo == receiver) }
            changes.append(below ? .sentEach([event.seq], to: receiver) : .sent(upTo: event.seq, to: receiver))
        }
        event.everSent = true
        event.sentTo = receiver
        events.insert(event, at: sentCount)
        sentCount += 1
        highestSent = max(highestSent, event.seq)
        return (event, redelivered)
    }

    /// Gives the waiting events of the source of the event at `index`, from
    /// it on, new seqs in their order, and moves them to the end (their
    /// seqs are now the highest). Returns the event's new index.
    private mutating func renumberSource(from index: Int) -> Int {
        let source = events[index].source
        let first = events[index].seq
        var moved: [QueuedEvent] = []
        var kept: [QueuedEvent] = []
        for event in events[sentCount...] {
            if event.seq >= first && event.source == source { moved.append(event) } else { kept.append(event) }
        }
        for position in moved.indices {
            let old = moved[position].seq
            moved[position].seq = nextSeq
            // Whoever had the old seq never had this one.
            moved[position].sentTo = nil
            nextSeq += 1
            changes.append(.renumbered(old, to: moved[position].seq))
        }
        events.removeSubrange(sentCount...)
        events.append(contentsOf: kept)
        let start = events.count
        events.append(contentsOf: moved)
        return start
    }

    /// Drops every event up to and including `seq` that was sent to this
    /// process: on the current connection, or with that same seq on an
    /// earlier connection of the same process (`sentTo == receiver`, also
    /// of an earlier daemon); returns how many. Events the process was not
    /// sent (held back, waiting, or sent to another process) are never
    /// acknowledged, whatever their seq.
    @discardableResult
    public mutating func acknowledge(upTo seq: UInt64) -> Int {
        // The sent events are in increasing seq: a prefix of them.
        let onConnection = events[..<sentCount].prefix { $0.seq <= seq }.count
        var earlier: [UInt64] = []
        if let receiver {
            earlier = events[sentCount...].filter { $0.seq <= seq && $0.everSent && $0.sentTo == receiver }.map(\.seq)
        }
        guard onConnection > 0 || !earlier.isEmpty else { return 0 }
        var seqs = events[..<onConnection].map(\.seq)
        events.removeFirst(onConnection)
        sentCount -= onConnection
        if !earlier.isEmpty {
            let gone = Set(earlier)
            let kept = events[sentCount...].filter { !gone.contains($0.seq) }
            events.removeSubrange(sentCount...)
            events.append(contentsOf: kept)
            seqs = (seqs + earlier).sorted()
        }
        let last = seqs[seqs.count - 1]
        // Cumulative where that is exact: no event at or below it stays.
        let below = events.contains { $0.seq <= last }
        changes.append(below ? .acknowledgedEach(seqs) : .acknowledged(upTo: last))
        return seqs.count
    }

    /// The connection is gone: whatever was sent and not acknowledged goes again.
    public mutating func rewind() {
        if sentCount > 0, sentCount < events.count, events[sentCount - 1].seq > events[sentCount].seq {
            events.sort { $0.seq < $1.seq }  // back to seq order: per source, the order they came in
        }
        sentCount = 0
        highestSent = 0
        receiver = nil
    }

    /// A new connection, from `process` when known: everything unacknowledged
    /// goes again (`rewind`), and what is sent is recorded as sent to it.
    public mutating func connect(from process: ProcessIdentity?) {
        rewind()
        receiver = process
    }
}

/// A change to what of a queue outlives the daemon (see `JournalRecord`).
public enum QueueChange: Sendable, Equatable {
    case enqueued(QueuedEvent)
    case merged(seq: UInt64, offset: Int, bytes: [UInt8])
    case sent(upTo: UInt64, to: ProcessIdentity?)
    case sentEach([UInt64], to: ProcessIdentity?)
    case acknowledged(upTo: UInt64)
    case acknowledgedEach([UInt64])
    case renumbered(UInt64, to: UInt64)
    case withdrawn([UInt64])
    case drops(unreported: Int, firstKind: String?, total: Int)

    func record(app: String) -> JournalRecord {
        switch self {
        case let .enqueued(event): .enqueued(app: app, event: event)
        case let .merged(seq, offset, bytes): .merged(app: app, seq: seq, offset: offset, bytes: bytes)
        case let .sent(seq, process): .sent(app: app, upTo: seq, to: process)
        case let .sentEach(seqs, process): .sentEach(app: app, seqs: seqs, to: process)
        case let .acknowledged(seq): .acknowledged(app: app, upTo: seq)
        case let .acknowledgedEach(seqs): .acknowledgedEach(app: app, seqs: seqs)
        case let .renumbered(old, new): .renumbered(app: app, seq: old, to: new)
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
