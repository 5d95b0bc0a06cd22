import Testing
import VigilKit

extension FakeDaemon {
    /// The opening of the "held until a manager exists" tests of the central
    /// and peripheral managers: events 1 and 4 are plain, `sendHeld` sends 2
    /// and 3 (a manager's kinds). The app's own stream must skip 2 and 3, and
    /// acknowledging 4 must acknowledge only 1: 2 and 3 wait, unacknowledged,
    /// for the manager the caller creates next.
    func expectManagerEventsHeld(by app: Application, sendHeld: () -> Void) async throws {
        var appEvents = app.events.makeAsyncIterator()
        event(1, "test")
        sendHeld()
        event(4, "test")
        guard case let .event(first)? = await appEvents.next(), case let .event(fourth)? = await appEvents.next() else {
            Issue.record("Application.events ended")
            return
        }
        #expect(first.seq == 1 && fourth.seq == 4)
        app.acknowledge(fourth)
        try await waitFor("ack 1") { _ in self.acks.contains(1) }
        try await Task.sleep(for: .milliseconds(100))
        #expect(acks == [1])
    }
}
