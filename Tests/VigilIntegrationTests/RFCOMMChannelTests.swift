import Foundation
import Testing
import VigilKit

/// `RFCOMMChannel` against `FakeDaemon`: a channel is a session, so its
/// bytes, its end and its writes take the session path. No vigild, no
/// Bluetooth (Tests/Lab/65-vigild-rfcomm.py has the real thing).
@Suite("RFCOMMChannel (fake daemon)", .serialized, .timeLimit(.minutes(1)))
struct RFCOMMChannelTests {
    static let device = "00:AA:01:01:00:01"

    static func header<M: Message>(_ message: M) -> String {
        String(decoding: MessageCodec.frame(message).header, as: UTF8.self)
    }

    @Test("a channel opened by UUID yields its session's bytes, writes through the session, and ends with its reason")
    func openedByUUID() async throws {
        let fake = try FakeDaemon()
        defer { fake.stop() }
        let info = RFCOMMChannelInfo(session: 9, peer: Self.device, channel: 3)
        fake.respond { message in
            switch message.type {
            case OpenRFCOMMChannel.type: (Self.header(RFCOMMChannelOpened(channel: info)), [])
            case WriteToSession.type: (Self.header(BytesWritten(written: message.body.count)), [])
            default: nil
            }
        }
        let app = try await Application.connect(socketPath: fake.path)
        let channel = try await app.openRFCOMMChannel(device: Self.device, uuid: "0x1101", reopen: true)
        let request = try #require(fake.received(OpenRFCOMMChannel.type).first).decode(OpenRFCOMMChannel.self)
        #expect(request == OpenRFCOMMChannel(device: Self.device, uuid: "0x1101", reopen: true))
        #expect(channel.info == info && channel.channel == 3 && channel.closeReason == nil)

        try await channel.write([0x41, 0x54, 0x0D])
        let written = try #require(fake.received(WriteToSession.type).first)
        #expect(try written.decode(WriteToSession.self).session == 9 && written.body == [0x41, 0x54, 0x0D])

        fake.event(1, AccessoryEventKind.data, ["session": .number(9)], body: [1, 2])
        fake.event(2, AccessoryEventKind.closed, ["session": .number(9), "reason": .string("the link went"), "willReopen": .bool(true)])
        fake.event(3, AccessoryEventKind.data, ["session": .number(9)], body: [3])
        fake.event(4, AccessoryEventKind.closed, ["session": .number(9), "reason": .string("closed by its holder"), "willReopen": .bool(false)])
        var items: [AccessorySession.Event] = []
        for await item in channel.incoming { items.append(item) }
        #expect(items == [.data([1, 2]), .interrupted(reason: "the link went"), .data([3]), .closed(reason: "closed by its holder")])
        try await fake.waitFor("acks up to 4") { _ in fake.acks.contains(4) }
    }

    @Test("refusals come back as the daemon's errors")
    func refused() async throws {
        let fake = try FakeDaemon()
        defer { fake.stop() }
        fake.respond { message in
            message.type == OpenRFCOMMChannel.type
                ? (Self.header(ProtocolError(.notFound, "BlueZ does not know \(Self.device): pair it first")), []) : nil
        }
        let app = try await Application.connect(socketPath: fake.path)
        do {
            _ = try await app.openRFCOMMChannel(device: Self.device, channel: 1)
            Issue.record("the channel opened")
        } catch let error as ProtocolError {
            #expect(error.code == .notFound)
        }
    }

    @Test("a device's connection to a published service: the incoming event reaches the app, and data read before it took the channel is held for it")
    func incomingChannel() async throws {
        let fake = try FakeDaemon()
        defer { fake.stop() }
        let serialPort = "00001101-0000-1000-8000-00805f9b34fb"
        fake.respond { message in
            message.type == PublishRFCOMMService.type ? (Self.header(RFCOMMServicePublished(uuid: serialPort, channel: 3)), []) : nil
        }
        let app = try await Application.connect(socketPath: fake.path)
        #expect(try await app.publishRFCOMMService(channel: 3, name: "Port") == serialPort)
        let published = try #require(fake.received(PublishRFCOMMService.type).first).decode(PublishRFCOMMService.self)
        #expect(published == PublishRFCOMMService(channel: 3, name: "Port"))
        var events = app.events.makeAsyncIterator()
        let info = RFCOMMChannelInfo(session: 9, peer: "00:AA:01:00:00:23", channel: 3)
        var attributes = info.attributes
        attributes["uuid"] = .string(serialPort)
        fake.event(1, RFCOMMEventKind.incoming, attributes)
        fake.event(2, AccessoryEventKind.data, ["session": .number(9)], body: [0xAA])
        fake.event(3, "test")
        guard case let .event(incoming)? = await events.next() else {
            Issue.record("no incoming event")
            return
        }
        #expect(incoming.kind == RFCOMMEventKind.incoming)
        guard case let .event(next)? = await events.next() else {
            Issue.record("no test event")
            return
        }
        #expect(next.seq == 3, "the data event is the channel's, not the app's")
        let channel = try #require(app.rfcommChannel(incoming: incoming))
        #expect(app.rfcommChannel(incoming: incoming) == nil, "taken once")
        #expect(channel.info == info)
        var bytes = channel.bytes.makeAsyncIterator()
        #expect(await bytes.next() == [0xAA])
    }
}
