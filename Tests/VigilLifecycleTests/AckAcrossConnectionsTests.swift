import Testing
import VigilProtocol
@testable import VigilLifecycle

/// Issue 26: an `ack` covers what the acknowledging process was sent, on
/// this connection or with the same seq on an earlier one of the same
/// process (docs/lifecycle.md, "Acknowledgement across connections").
@Suite("Event queue: acknowledgement across connections")
struct AckAcrossConnectionsTests {
    let first = ProcessIdentity(pid: 100, startTime: 5000)
    let relaunched = ProcessIdentity(pid: 100, startTime: 6000)  // the pid reused

    /// A queue whose events 1...count were sent to `process` on a connection now gone.
    func queue(sentTo process: ProcessIdentity?, count: Int = 3) -> EventQueue {
        var queue = EventQueue(limit: 10)
        for _ in 0..<count { _ = queue.append(QueuedEvent(kind: "test")) }
        queue.connect(from: process)
        _ = queue.takeSendable { _ in true }
        queue.rewind()
        _ = queue.takeChanges()
        return queue
    }

    @Test func theSameProcessAcknowledgesWhatItWasSentOnAnEarlierConnection() {
        var queue = queue(sentTo: first)
        queue.connect(from: first)
        #expect(queue.acknowledge(upTo: 2) == 2)
        #expect(queue.events.map(\.seq) == [3])
        #expect(queue.takeChanges() == [.acknowledged(upTo: 2)])
        // What is left goes out again, redelivered.
        let again = queue.takeSendable { _ in true }
        #expect(again.map(\.event.seq) == [3])
        #expect(again.map(\.redelivered) == [true])
    }

    @Test func anotherProcessDoesNotEvenWithTheSamePid() {
        var queue = queue(sentTo: first)
        queue.connect(from: relaunched)
        #expect(queue.acknowledge(upTo: 3) == 0)
        #expect(queue.events.count == 3)
        queue.connect(from: nil)  // a process not known
        #expect(queue.acknowledge(upTo: 3) == 0)
        // Sent when the receiver was not recorded: nobody may, later.
        var unknown = self.queue(sentTo: nil)
        unknown.connect(from: first)
        #expect(unknown.acknowledge(upTo: 3) == 0)
    }

    @Test func aRedeliveryToAnotherProcessIsRecorded() {
        var queue = queue(sentTo: first)
        queue.connect(from: relaunched)
        #expect(queue.takeSendable { $0.seq == 1 }.map(\.event.seq) == [1])
        #expect(queue.takeChanges() == [.sent(upTo: 1, to: relaunched)])
        queue.rewind()
        // The first process no longer may acknowledge seq 1 (it was sent on to
        // the relaunched one, last), but still seqs 2 and 3.
        queue.connect(from: first)
        #expect(queue.acknowledge(upTo: 3) == 2)
        #expect(queue.events.map(\.seq) == [1])
        #expect(queue.takeChanges() == [.acknowledgedEach([2, 3])])
        queue.connect(from: relaunched)
        #expect(queue.acknowledge(upTo: 1) == 1)
        #expect(queue.events.isEmpty)
    }

    @Test func aRenumberedEventIsNoLongerTheOneThatProcessHad() {
        var queue = EventQueue(limit: 10)
        _ = queue.append(QueuedEvent(kind: "accessory.connected"))  // 1, waits below
        _ = queue.append(QueuedEvent(kind: "test"))  // 2
        queue.connect(from: first)
        #expect(queue.takeSendable { $0.kind == "test" }.map(\.event.seq) == [2])
        // Seq 1 goes after 2 on the same connection: renumbered to 3.
        #expect(queue.takeSendable { _ in true }.map(\.event.seq) == [3])
        queue.rewind()
        queue.connect(from: first)
        #expect(queue.acknowledge(upTo: 3) == 2)
        #expect(queue.events.isEmpty)
        // The renumbering itself forgets the receiver of the old seq.
        var held = EventQueue(limit: 10)
        _ = held.append(QueuedEvent(kind: "accessory.connected"))
        _ = held.append(QueuedEvent(kind: "test"))
        held.connect(from: first)
        _ = held.takeSendable { _ in true }
        held.rewind()
        held.connect(from: relaunched)
        _ = held.takeSendable { $0.kind == "test" }
        _ = held.takeSendable { _ in true }
        held.rewind()
        held.connect(from: first)
        #expect(held.acknowledge(upTo: 1) == 0)
    }
}
