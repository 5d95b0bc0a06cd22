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

    // MARK: finishedProcessing() while a session's item is held

    /// An app holding the first item of a session's stream (the body of a
    /// `for await` loop), as `vigil-accessory-bench --app` and the sensor
    /// logger are when they call `finishedProcessing()`.
    func holdingFirstItem(features: [String]?) async throws -> (FakeDaemon, Application, RFCOMMChannel) {
        let fake = try FakeDaemon()
        fake.setFeatures(features)
        let info = RFCOMMChannelInfo(session: 9, peer: "00:AA:01:01:00:01", channel: 3)
        fake.respond { message in
            message.type == OpenRFCOMMChannel.type
                ? (String(decoding: MessageCodec.frame(RFCOMMChannelOpened(channel: info)).header, as: UTF8.self), []) : nil
        }
        let app = try await Application.connect(socketPath: fake.path)
        let channel = try await app.openRFCOMMChannel(device: info.peer, channel: 3)
        fake.event(1, AccessoryEventKind.data, ["session": .number(9)], body: [1, 2])
        return (fake, app, channel)
    }

    /// Sends `event` once `condition` holds on what the fake received (from another task).
    func send(_ fake: FakeDaemon, after what: String, _ condition: @escaping @Sendable ([IncomingMessage]) -> Bool, _ event: @escaping @Sendable () -> Void) -> Task<Void, any Error> {
        Task {
            try await fake.waitFor(what, condition)
            event()
        }
    }

    @Test("finishedProcessing() while a session's item is held goes out with that item's ack, as one message")
    func heldItemFinishesWithItsAck() async throws {
        let (fake, app, channel) = try await holdingFirstItem(features: [Welcome.Feature.finishAcknowledges])
        defer { fake.stop() }
        var items = channel.incoming.makeAsyncIterator()
        #expect(await items.next() == .data([1, 2]))
        await app.finishedProcessing()  // returns at once: it waits for the item's ack
        #expect(fake.received(FinishedProcessing.type).isEmpty)
        let second = send(fake, after: "finishedProcessing", { $0.contains { $0.type == FinishedProcessing.type } }) {
            fake.event(2, AccessoryEventKind.data, ["session": .number(9)], body: [3])
        }
        #expect(await items.next() == .data([3]))  // the loop comes round: the item is done
        try await second.value
        let finished = try fake.received(FinishedProcessing.type).map { try $0.decode(FinishedProcessing.self) }
        #expect(finished == [FinishedProcessing(ack: 1)])
        #expect(fake.acks.isEmpty)
        app.disconnect()
    }

    @Test("an event that arrives between finishedProcessing() and the ack cancels the finish: a plain ack goes")
    func eventInBetweenCancelsTheFinish() async throws {
        let (fake, app, channel) = try await holdingFirstItem(features: [Welcome.Feature.finishAcknowledges])
        defer { fake.stop() }
        var items = channel.incoming.makeAsyncIterator()
        #expect(await items.next() == .data([1, 2]))
        await app.finishedProcessing()
        fake.event(2, "test")
        var events = app.events.makeAsyncIterator()
        while let item = await events.next() {
            if case .event = item { break }  // the router has it
        }
        let third = send(fake, after: "ack 1", { _ in fake.acks == [1] }) {
            fake.event(3, AccessoryEventKind.data, ["session": .number(9)], body: [3])
        }
        #expect(await items.next() == .data([3]))
        try await third.value
        #expect(fake.received(FinishedProcessing.type).isEmpty)
        app.disconnect()
    }

    @Test("to an older daemon, finishedProcessing() while an item is held is sent at once, then the ack")
    func heldItemToAnOlderDaemon() async throws {
        let (fake, app, channel) = try await holdingFirstItem(features: nil)
        defer { fake.stop() }
        var items = channel.incoming.makeAsyncIterator()
        #expect(await items.next() == .data([1, 2]))
        await app.finishedProcessing()
        #expect(try fake.received(FinishedProcessing.type).map { try $0.decode(FinishedProcessing.self) } == [FinishedProcessing(ack: nil)])
        let second = send(fake, after: "ack 1", { _ in fake.acks == [1] }) {
            fake.event(2, AccessoryEventKind.data, ["session": .number(9)], body: [3])
        }
        #expect(await items.next() == .data([3]))
        try await second.value
        let order = fake.received.map(\.type).filter { $0 == Acknowledge.type || $0 == FinishedProcessing.type }
        #expect(order == [FinishedProcessing.type, Acknowledge.type])
        app.disconnect()
    }
}
