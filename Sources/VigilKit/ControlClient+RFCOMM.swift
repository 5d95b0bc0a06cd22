import VigilProtocol

/// RFCOMM channels for the control role (`vigilctl ble rfcomm`): the daemon
/// pushes a channel's bytes as it reads them, and closes the channel when
/// this connection closes.
extension ControlClient {
    /// Opens an RFCOMM channel to server `channel` or to the service `uuid` on
    /// a BR/EDR device BlueZ knows; returns once the device accepted it.
    public func openRFCOMMChannel(
        device: String, channel: Int? = nil, uuid: String? = nil, security: String? = nil
    ) async throws -> ControlRFCOMMChannel {
        let (output, continuation) = AsyncStream.makeStream(of: ControlSession.Output.self)
        let pushes = self.pushes
        let request = OpenRFCOMMChannel(device: device, channel: channel, uuid: uuid, security: security)
        do {
            let opened = try await connection.request(request, expecting: RFCOMMChannelOpened.self) { reply in
                guard let opened = try? reply.decode(RFCOMMChannelOpened.self) else { return }
                pushes.addSession(opened.channel.session, continuation)
            }
            return ControlRFCOMMChannel(info: opened.channel, output: output)
        } catch {
            continuation.finish()
            throw error
        }
    }
}

extension ControlClient {
    /// Channels devices open to serial services this client publishes, from
    /// now on (take it before `publishRFCOMMService`), until the connection closes.
    public func incomingRFCOMMChannels() -> AsyncStream<ControlRFCOMMChannel> {
        let (channels, continuation) = AsyncStream.makeStream(of: ControlRFCOMMChannel.self)
        pushes.addRFCOMMListener(continuation)
        return channels
    }

    /// Publishes a serial port service (default UUID 0x1101) on `channel`
    /// (nil: bluetoothd's choice); returns the UUID as registered. It goes
    /// with this connection.
    public func publishRFCOMMService(uuid: String? = nil, channel: Int? = nil, name: String? = nil,
                                     requireAuthentication: Bool? = nil) async throws -> RFCOMMServicePublished {
        try await connection.request(PublishRFCOMMService(uuid: uuid, channel: channel, name: name,
                                                          requireAuthentication: requireAuthentication),
                                     expecting: RFCOMMServicePublished.self)
    }

    public func unpublishRFCOMMService(uuid: String) async throws {
        _ = try await connection.request(UnpublishRFCOMMService(uuid: uuid), expecting: Done.self)
    }
}

/// A control client's RFCOMM channel: its description and its bytes (`write`
/// and `closeSession` with `info.session`, as for a terminal session).
public struct ControlRFCOMMChannel: Sendable {
    public let info: RFCOMMChannelInfo
    public let output: AsyncStream<ControlSession.Output>
}
