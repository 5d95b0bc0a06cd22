import VigilProtocol

/// L2CAP channels for the control role (`vigilctl ble l2cap`): like an
/// accessory terminal's session, the daemon pushes a channel's bytes as it
/// reads them, and closes the channel (and unpublishes PSMs) when this
/// connection closes.
extension ControlClient {
    /// Opens a channel to `psm` on a peripheral this client asked to connect
    /// (`connectPeripheral`, link up); returns once the peripheral accepted it.
    public func openL2CAPChannel(
        peripheral: String, psm: Int, security: String? = nil, receiveMTU: Int? = nil
    ) async throws -> ControlL2CAPChannel {
        let (output, continuation) = AsyncStream.makeStream(of: ControlSession.Output.self)
        let pushes = self.pushes
        let request = OpenL2CAPChannel(peripheral: peripheral, psm: psm, security: security, receiveMTU: receiveMTU)
        do {
            let opened = try await connection.request(request, expecting: L2CAPChannelOpened.self) { reply in
                guard let opened = try? reply.decode(L2CAPChannelOpened.self) else { return }
                pushes.addSession(opened.channel.session, continuation)
            }
            return ControlL2CAPChannel(info: opened.channel, output: output)
        } catch {
            continuation.finish()
            throw error
        }
    }

    /// Channels centrals open to PSMs this client publishes, from now on (take
    /// it before `publishL2CAPChannel`), until the connection closes.
    public func incomingL2CAPChannels() -> AsyncStream<ControlL2CAPChannel> {
        let (channels, continuation) = AsyncStream.makeStream(of: ControlL2CAPChannel.self)
        pushes.addL2CAPListener(continuation)
        return channels
    }

    /// Listens on `psm` (nil: a free dynamic one); returns the PSM.
    public func publishL2CAPChannel(psm: Int? = nil, security: String? = nil, receiveMTU: Int? = nil) async throws -> Int {
        try await connection.request(PublishL2CAPChannel(psm: psm, security: security, receiveMTU: receiveMTU),
                                     expecting: L2CAPChannelPublished.self).psm
    }

    public func unpublishL2CAPChannel(psm: Int) async throws {
        _ = try await connection.request(UnpublishL2CAPChannel(psm: psm), expecting: Done.self)
    }
}

/// A control client's channel: its description and its bytes (`write` and
/// `closeSession` with `info.session`, as for a terminal session).
public struct ControlL2CAPChannel: Sendable {
    public let info: L2CAPChannelInfo
    public let output: AsyncStream<ControlSession.Output>
}
