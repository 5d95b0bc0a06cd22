/// Cumulative acknowledgement for a client that hands events to several
/// consumers (the app's `events`, accessory notifications, one stream per
/// session), each finishing them at its own pace.
///
/// `ack` is cumulative: acknowledging `seq` drops every earlier event from the
/// daemon's queue. So the client may only acknowledge up to the last event
/// before the oldest one some consumer has not finished; otherwise a crash
/// would lose an event that one consumer was still working on. Each consumer
/// finishes cumulatively too, within its own events, in the order it got them.
///
/// Pure bookkeeping (no I/O), `package` so that the tests see it.
package struct AcknowledgementLedger: Sendable {
    package enum Consumer: Hashable, Sendable {
        /// `Application.events`.
        case events
        /// `AccessoryManager.notifications`.
        case notifications
        case session(Int)
    }

    private struct Entry: Sendable {
        var seq: UInt64
        /// nil while the event is held back, not yet handed to a consumer.
        var consumer: Consumer?
        var isDone = false
    }

    /// Events received and not acknowledged yet, in `seq` order, from `head` on.
    private var entries: [Entry] = []
    private var head = 0
    /// The last `seq` this ledger let go: what the daemon was (or will be) told.
    package private(set) var acknowledged: UInt64?

    package init() {}

    /// Events received and not yet acknowledged.
    package var outstandingCount: Int { entries.count - head }

    /// An event arrived for `consumer` (nil: held back until `assign`). Events
    /// arrive in increasing `seq` on one connection.
    package mutating func received(_ seq: UInt64, for consumer: Consumer?) {
        entries.append(Entry(seq: seq, consumer: consumer))
    }

    /// A held-back event goes to `consumer` after all.
    package mutating func assign(_ seq: UInt64, to consumer: Consumer) {
        guard let index = index(of: seq) else { return }
        entries[index].consumer = consumer
    }

    /// `consumer` is done with each of its events up to and including `seq`.
    /// Returns the `seq` to acknowledge now, or nil when the acknowledged prefix did not grow.
    package mutating func finish(_ consumer: Consumer, upTo seq: UInt64) -> UInt64? {
        for index in head..<entries.count where entries[index].seq <= seq && entries[index].consumer == consumer {
            entries[index].isDone = true
        }
        return advance()
    }

    /// `consumer` is gone or gave up its events (a session closed by the app): all of them count as done.
    package mutating func finishAll(_ consumer: Consumer) -> UInt64? {
        for index in head..<entries.count where entries[index].consumer == consumer {
            entries[index].isDone = true
        }
        return advance()
    }

    /// The connection is gone: the daemon sends every unacknowledged event
    /// again on the next one, so nothing of this one is tracked any more.
    package mutating func reset() {
        entries.removeAll()
        head = 0
        acknowledged = nil
    }

    private func index(of seq: UInt64) -> Int? {
        (head..<entries.count).first { entries[$0].seq == seq }
    }

    /// Lets go of the finished prefix.
    private mutating func advance() -> UInt64? {
        var last: UInt64?
        while head < entries.count, entries[head].isDone {
            last = entries[head].seq
            head += 1
        }
        if head == entries.count {
            entries.removeAll(keepingCapacity: true)
            head = 0
        } else if head > 256, head * 2 > entries.count {
            entries.removeFirst(head)
            head = 0
        }
        if let last { acknowledged = last }
        return last
    }
}
