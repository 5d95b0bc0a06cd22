import Foundation
import Testing
import VigilKit

/// `L2CAPChannel` against `FakeDaemon`: a channel is a session, so its bytes,
/// its end and its writes take the session path; a channel a central opens
/// (`ble.l2cap.incoming`) holds its data from the moment the event was read.
/// No vigild, no Bluetooth (Tests/Lab/58-vigild-l2cap.py has the real thing).
@Suite("L2CAPChannel (fake daemon)", .serialized, .timeLimit(.minutes(1)))
struct L2CAPChannelTests {
    static let peer = "C0:DE:00:00:00:20"

    static func header<M: Message>(_ message: M) -> String {
        String(decoding: MessageCodec.frame(message).header, as: UTF8.self)
    }

    static func info(_ session: Int) -> L2CAPChannelInfo {
        L2CAPChannelInfo(session: session, peer: peer, psm: 0x80, sendMTU: 247, receiveMTU: 2048)
    }

    @Test("an opened channel yields its session's bytes in order, writes through the session, and ends with its reason")
    func openedChannel() async throws {
        let fake = try FakeDaemon()
        defer { fake.stop() }
        fake.respond { message in
            switch message.type {
            case OpenL2CAPChannel.type: (Self.header(L2CAPChannelOpened(channel: Self.info(7))), [])
            case WriteToSession.type: (Self.header(BytesWritten(written: message.body.count)), [])
            default: nil
            }
        }
        let app = try await Application.connect(socketPath: fake.path)
        let channel = try await app.openL2CAPChannel(peripheral: Self.peer, psm: 0x80, reopen: true, security: "medium",
                                                     coalesce: .milliseconds(20))
        let request = try #require(fake.received(OpenL2CAPChannel.type).first).decode(OpenL2CAPChannel.self)
        #expect(request == OpenL2CAPChannel(peripheral: Self.peer, psm: 0x80, reopen: true, security: "medium",
                                            coalesceMilliseconds: 20))
        #expect(channel.info == Self.info(7) && channel.sendMTU == 247 && channel.closeReason == nil)

        try await channel.write([1, 2, 3])
        let written = try #require(fake.received(WriteToSession.type).first)
        #expect(try written.decode(WriteToSession.self).session == 7 && written.body == [1, 2, 3])

        fake.event(1, AccessoryEventKind.data, ["session": .number(7)], body: [10, 11])
        fake.event(2, AccessoryEventKind.closed, ["session": .number(7), "reason": .string("the link went"), "willReopen": .bool(true)])
        fake.event(3, AccessoryEventKind.data, ["session": .number(7)], body: [12])
        fake.event(4, AccessoryEventKind.closed, ["session": .number(7), "reason": .string("the peer closed it"), "willReopen": .bool(false)])
        var items: [AccessorySession.Event] = []
        for await item in channel.incoming { items.append(item) }
        #expect(items == [.data([10, 11]), .interrupted(reason: "the link went"), .data([12]), .closed(reason: "the peer closed it")])
        #expect(channel.closeReason == "the peer closed it")
        try await fake.waitFor("acks up to 4") { _ in fake.acks.contains(4) }
    }

    @Test("refusals come back as the daemon's errors")
    func refused() async throws {
        let fake = try FakeDaemon()
        defer { fake.stop() }
        fake.respond { message in
            message.type == OpenL2CAPChannel.type
                ? (Self.header(ProtocolError(.notConnected, "not connected to \(Self.peer): ask for the connection first")), []) : nil
        }
        let app = try await Application.connect(socketPath: fake.path)
        await #expect(throws: ProtocolError.self) { try await app.openL2CAPChannel(peripheral: Self.peer, psm: 0x80) }
        do {
            _ = try await app.openL2CAPChannel(peripheral: Self.peer, psm: 0x80)
        } catch let error as ProtocolError {
            #expect(error.code == .notConnected)
        }
    }

    @Test("a central's channel: the incoming event reaches the app, and data read before it took the channel is held for it")
    func incomingChannel() async throws {
        let fake = try FakeDaemon()
        defer { fake.stop() }
        fake.respond { message in
            message.type == PublishL2CAPChannel.type ? (Self.header(L2CAPChannelPublished(psm: 0x81)), []) : nil
        }
        let app = try await Application.connect(socketPath: fake.path)
        #expect(try await app.publishL2CAPChannel(coalesce: .zero) == 0x81)
        let published = try #require(fake.received(PublishL2CAPChannel.type).first).decode(PublishL2CAPChannel.self)
        #expect(published == PublishL2CAPChannel(coalesceMilliseconds: 0))
        var events = app.events.makeAsyncIterator()
        fake.event(1, L2CAPEventKind.incoming, Self.info(9).attributes)
        fake.event(2, AccessoryEventKind.data, ["session": .number(9)], body: [0xAA])
        fake.event(3, "test")
        guard case let .event(incoming)? = await events.next() else {
            Issue.record("no incoming event")
            return
        }
        #expect(incoming.kind == L2CAPEventKind.incoming)
        // The data event is the channel's, not the app's: the next app event is 3.
        guard case let .event(next)? = await events.next() else {
            Issue.record("no test event")
            return
        }
        #expect(next.seq == 3)
        let channel = try #require(app.l2capChannel(incoming: incoming))
        #expect(app.l2capChannel(incoming: incoming) == nil, "taken once")
        #expect(channel.info == Self.info(9))
        var bytes = channel.bytes.makeAsyncIterator()
        #expect(await bytes.next() == [0xAA])
    }
}
