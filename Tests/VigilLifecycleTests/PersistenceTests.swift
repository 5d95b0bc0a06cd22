import Foundation
import Testing
import VigilProtocol
@testable import VigilLifecycle

@Suite("what outlives the daemon: unacknowledged events and force-quit")
struct PersistenceTests {
    @Test func savedStateRoundTripsThroughJSONAndRestoresQueuesAndForceQuit() throws {
        let h = Harness()
        let id = Harness.plain
        try h.suspended(id)
        _ = try h.engine.deliver(QueuedEvent(kind: "session.data", attributes: ["session": 3], payload: Array(0...255)), to: id, now: h.now)
        _ = try h.deliver("test", to: id)
        try h.engine.forceQuit(id, now: h.now)

        let data = try JSONEncoder().encode(h.engine.savedState())
        // Payloads are stored as base64, not as arrays of numbers.
        let text = String(decoding: data, as: UTF8.self)
        #expect(text.contains("\"payload\":\"AAECAwQF"))
        #expect(!text.contains("[0,1,2,3"))
        let saved = try JSONDecoder().decode([String: SavedApp].self, from: data)

        let restored = Harness()
        restored.engine.restore(saved, now: 0)
        let app = restored.app(id)
        #expect(app.forceQuit)
        #expect(app.queue.events.map(\.kind) == ["session.data", "test"])
        #expect(app.queue.events.first?.payload == Array(0...255))
        #expect(app.queue.events.first?.attributes["session"] == 3)
        #expect(app.queue.unacknowledgedCount == 0)  // nothing counts as sent to a new connection
        // Numbering carries on after the restored events.
        #expect(try restored.deliver("test", to: id).seq == 3)
    }
}
