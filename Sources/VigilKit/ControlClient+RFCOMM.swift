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

/// A control client's RFCOMM channel: its description and its bytes (`write`
/// and `closeSession` with `info.session`, as for a terminal session).
public struct ControlRFCOMMChannel: Sendable {
    public let info: RFCOMMChannelInfo
    public let output: AsyncStream<ControlSession.Output>
}
