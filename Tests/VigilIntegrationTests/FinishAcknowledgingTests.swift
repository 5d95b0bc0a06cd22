import Testing
import VigilKit
import VigilProtocol

/// `Application.finishedProcessing(acknowledging:)` against `FakeDaemon`: one
/// message to a daemon that names `finishedProcessing.ack` in its welcome,
/// the two messages of protocol version 1 as first published to one that does
/// not (an older vigild ignores the member: the event would stay unacknowledged).
@Suite("finishedProcessing carrying the ack (fake daemon)", .serialized, .timeLimit(.minutes(1)))
struct FinishAcknowledgingTests {
    func finish(features: [String]?) async throws -> FakeDaemon {
        let fake = try FakeDaemon()
        fake.setFeatures(features)
        let app = try await Application.connect(socketPath: fake.path)
        fake.event(1, "test")
        var events = app.events.makeAsyncIterator()
        var event: AppEvent?
        while event == nil, let item = await events.next() {
            if case let .event(received) = item { event = received }
        }
        await app.finishedProcessing(acknowledging: try #require(event))
        app.disconnect()
        return fake
    }

    @Test("a daemon naming the feature gets one finishedProcessing with ack")
    func oneMessage() async throws {
        let fake = try await finish(features: [Welcome.Feature.finishAcknowledges])
        defer { fake.stop() }
        let finished = try fake.received(FinishedProcessing.type).map { try $0.decode(FinishedProcessing.self) }
        #expect(finished == [FinishedProcessing(ack: 1)])
        #expect(fake.acks.isEmpty)
    }

    @Test("an older daemon (no features) gets ack, then finishedProcessing without it")
    func twoMessagesToAnOlderDaemon() async throws {
        let fake = try await finish(features: nil)
        defer { fake.stop() }
        let finished = try fake.received(FinishedProcessing.type).map { try $0.decode(FinishedProcessing.self) }
        #expect(finished == [FinishedProcessing(ack: nil)])
        #expect(fake.acks == [1])
        let order = fake.received.map(\.type).filter { $0 == Acknowledge.type || $0 == FinishedProcessing.type }
        #expect(order == [Acknowledge.type, FinishedProcessing.type])
    }
}
