import Testing
import VigilProtocol

@Suite struct L2CAPMessageTests {
    private func roundTrip<M: Message & Equatable>(_ message: M) throws -> M {
        var decoder = FrameDecoder()
        decoder.append(MessageCodec.frame(message, id: 3).encoded())
        let incoming = try IncomingMessage(frame: try #require(try decoder.next()))
        #expect(incoming.type == M.type)
        return try incoming.decode(M.self)
    }

    @Test func requestsAndRepliesSurviveTheWire() throws {
        for message in [OpenL2CAPChannel(peripheral: "C0:DE:00:00:00:20", psm: 0x80),
                        OpenL2CAPChannel(peripheral: "C0:DE:00:00:00:20", psm: 0x25, reopen: true, security: "high", receiveMTU: 512),
                        OpenL2CAPChannel(peripheral: "C0:DE:00:00:00:20", psm: 0x80, coalesceMilliseconds: 0)] {
            #expect(try roundTrip(message) == message)
        }
        for message in [PublishL2CAPChannel(), PublishL2CAPChannel(psm: 0x81, security: "medium", receiveMTU: 100),
                        PublishL2CAPChannel(coalesceMilliseconds: 250)] {
            #expect(try roundTrip(message) == message)
        }
        #expect(try roundTrip(UnpublishL2CAPChannel(psm: 0x81)) == UnpublishL2CAPChannel(psm: 0x81))
        #expect(try roundTrip(L2CAPChannelPublished(psm: 0x81)) == L2CAPChannelPublished(psm: 0x81))
        let info = L2CAPChannelInfo(session: 4, peer: "C0:DE:00:00:00:21", psm: 0x80, sendMTU: 247, receiveMTU: 2048)
        #expect(try roundTrip(L2CAPChannelOpened(channel: info)) == L2CAPChannelOpened(channel: info))
        #expect(try roundTrip(ListL2CAP()) == ListL2CAP())
        let list = L2CAPList(
            published: [PublishedL2CAP(psm: 0x81, holder: "app org.example.a", security: nil, receiveMTU: 2048, coalesceMilliseconds: 100)],
            channels: [L2CAPChannelStatus(session: 4, holder: "vigilctl (connection 2)", peer: "C0:DE:00:00:00:21", psm: 0x80,
                                          state: "waiting", reopen: true)])
        #expect(try roundTrip(list) == list)
    }

    @Test func coalescingTravelsAsWholeMillisecondsUnderItsProtocolName() throws {
        let header = String(decoding: MessageCodec.frame(OpenL2CAPChannel(peripheral: "C0:DE:00:00:00:20", psm: 0x80,
                                                                          coalesceMilliseconds: 5)).header, as: UTF8.self)
        #expect(header.contains("\"coalesceMilliseconds\":5"))
        #expect(!String(decoding: MessageCodec.frame(PublishL2CAPChannel()).header, as: UTF8.self).contains("coalesce"))
        #expect(L2CAPCoalescing.milliseconds(of: .zero) == 0)
        #expect(L2CAPCoalescing.milliseconds(of: .milliseconds(250)) == 250)
        #expect(L2CAPCoalescing.milliseconds(of: .seconds(1)) == 1000)
        #expect(L2CAPCoalescing.milliseconds(of: .microseconds(2600)) == 3)
        #expect(L2CAPCoalescing.milliseconds(of: .milliseconds(-5)) == -5)
        #expect(!L2CAPCoalescing.milliseconds.contains(L2CAPCoalescing.milliseconds(of: .seconds(Int64.max))))
        #expect(L2CAPCoalescing.milliseconds.contains(L2CAPCoalescing.defaultMilliseconds))
    }

    @Test func eventAttributesReadBackAndRefuseWhatIsMissing() {
        let info = L2CAPChannelInfo(session: 4, peer: "C0:DE:00:00:00:21", psm: 0x80, sendMTU: 247, receiveMTU: 2048)
        #expect(L2CAPChannelInfo(attributes: info.attributes) == info)
        var partial = info.attributes
        partial["sendMTU"] = nil
        #expect(L2CAPChannelInfo(attributes: partial) == nil)
        partial = info.attributes
        partial["session"] = .number(4.5)
        #expect(L2CAPChannelInfo(attributes: partial) == nil)
    }
}
