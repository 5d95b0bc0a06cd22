import VigilProtocol
import VigilSystem

/// Items from the daemon's event queue, each acknowledged once its consumer is
/// done with it: when the consumer asks for the next item, stops iterating, or
/// lets go of the sequence. So a loop body that stores a chunk before it comes
/// round again never loses it: if the process dies first, the daemon sends the
/// item again to the next process (in `Application.events`, marked
/// `redelivered`). Items the app never took at all are acknowledged when the
/// sequence (and its owner, such as the `AccessorySession`) is released.
///
/// Iterate it from one task: each item goes to a single consumer. An item held
/// and not finished also holds back the acknowledgement of every later event
/// of the app (acknowledgement is cumulative), so keep iterating; an app with
/// unacknowledged events is not suspended early, and a session whose data is
/// not acknowledged stops being read once its buffer is full.
public struct AcknowledgingStream<Element: Sendable>: AsyncSequence, Sendable {
    public typealias Failure = Never

    let base: AsyncStream<Delivery<Element>>
    /// Kept alive with the sequence: releasing the owner may end the stream (a session closes).
    let owner: (any AnyObject & Sendable)?

    public func makeAsyncIterator() -> Iterator {
        Iterator(base: base.makeAsyncIterator(), cursor: Cursor(owner: owner))
    }

    public struct Iterator: AsyncIteratorProtocol {
        var base: AsyncStream<Delivery<Element>>.Iterator
        let cursor: Cursor

        public mutating func next() async -> Element? {
            cursor.finishCurrent()
            guard let delivery = await base.next() else { return nil }
            cursor.current = delivery.token
            return delivery.element
        }

        public mutating func next(isolation actor: isolated (any Actor)?) async -> Element? {
            cursor.finishCurrent()
            guard let delivery = await base.next(isolation: actor) else { return nil }
            cursor.current = delivery.token
            return delivery.element
        }
    }

    /// The item the consumer holds; finished when it asks for another or lets go of the iterator.
    final class Cursor {
        var current: AcknowledgementToken?
        let owner: (any AnyObject & Sendable)?

        init(owner: (any AnyObject & Sendable)?) { self.owner = owner }

        func finishCurrent() {
            current?.finish()
            current = nil
        }

        deinit { current?.finish() }
    }
}

/// An item on its way to a consumer, with what acknowledges it (nil for items
/// made up locally, such as the end of a session the app closed itself).
struct Delivery<Element: Sendable>: Sendable {
    var element: Element
    var token: AcknowledgementToken?
}

/// One event handed to a consumer. Finishing it tells the router the consumer
/// is done with it (and with its own earlier ones); a token released unfinished
/// (a dropped buffer) finishes itself, while a crashed process finishes nothing.
final class AcknowledgementToken: Sendable {
    let seq: UInt64
    let consumer: AcknowledgementLedger.Consumer
    /// The connection epoch of the router: tokens of a lost connection finish nothing.
    let epoch: Int
    private let router: EventRouter
    private let isFinished = Locked(false)

    init(seq: UInt64, consumer: AcknowledgementLedger.Consumer, epoch: Int, router: EventRouter) {
        self.seq = seq
        self.consumer = consumer
        self.epoch = epoch
        self.router = router
    }

    func finish() {
        let first = isFinished.withLock { isFinished in
            defer { isFinished = true }
            return !isFinished
        }
        if first { router.finish(consumer, upTo: seq, epoch: epoch) }
    }

    deinit { finish() }
}
