import VigilProtocol
import VigilSystem

/// An RFCOMM channel (Bluetooth Classic serial, SPP): a byte stream to a
/// serial port service on a BR/EDR device BlueZ knows
/// (`Application.openRFCOMMChannel`).
///
/// ```swift
/// let channel = try await app.openRFCOMMChannel(device: "00:AA:01:00:00:23", uuid: "0x1101", reopen: true)
/// try await channel.write(Array("ATZ\r".utf8))
/// for await chunk in channel.bytes { try store(chunk); await app.finishedProcessing() }
/// ```
///
/// vigild holds the socket: the channel stays open while the app is
/// suspended, and what arrives wakes it (`bluetooth-central`). The bytes
/// travel as an accessory session's do (see `AccessorySession`). A channel
/// opened with `reopen` yields `.interrupted` when it closes by itself and
/// goes on, same session, once vigild has connected it again (a
/// `bluetooth.rfcomm.reopened` event in `Application.events` says so).
public final class RFCOMMChannel: Sendable {
    public let info: RFCOMMChannelInfo
    /// The stream underneath: `incoming`, `write`, `close` are its own.
    public let stream: AccessorySession

    init(info: RFCOMMChannelInfo, stream: AccessorySession) {
        self.info = info
        self.stream = stream
    }

    public var peer: String { info.peer }
    /// The server channel (1-30), as given or as the device's SDP record named it.
    public var channel: Int { info.channel }
    /// Why the channel ended; nil while it is open (or connecting again).
    public var closeReason: String? { stream.closeReason }

    /// Data, interruptions and the end (`.closed`), in order; see `AccessorySession.incoming`.
    public var incoming: AcknowledgingStream<AccessorySession.Event> { stream.incoming }
    /// Only the bytes; finishes when the channel ends.
    public var bytes: AccessorySession.Bytes { stream.bytes }

    /// Writes `bytes` and returns once vigild has handed them all to the kernel.
    public func write(_ bytes: [UInt8]) async throws { try await stream.write(bytes) }

    public func close() async { await stream.close() }

    static let noAccessory = AccessoryInfo(
        connectionID: 0, name: "RFCOMM channel", manufacturer: "", modelNumber: "", serialNumber: "", firmwareRevision: "",
        hardwareRevision: "", protocolStrings: [], deviceNode: "", vendorID: "", productID: "", sysPath: "", lineSettings: "")
}

extension Application {
    /// Opens an RFCOMM channel to server `channel` (1-30), or to the service
    /// `uuid` (its channel found through the device's SDP records), on a
    /// BR/EDR device BlueZ knows; returns once the device accepted it.
    /// Throws `notFound` (unknown device, nothing on the channel, no such
    /// service), `notConnected` (no answer), `unavailable`, `invalidArgument`.
    /// - Parameters:
    ///   - reopen: connect again (same session) whenever it closes by itself.
    ///   - security: `low` (default), `medium`, `high` or `fips`.
    ///   - coalesce: as `openL2CAPChannel`'s.
    public func openRFCOMMChannel(
        device: String, channel: Int? = nil, uuid: String? = nil, reopen: Bool = false, security: String? = nil,
        coalesce: Duration? = nil
    ) async throws -> RFCOMMChannel {
        let (stream, continuation) = AsyncStream.makeStream(of: Delivery<AccessorySession.Event>.self)
        let status = AccessorySession.Status(accessory: RFCOMMChannel.noAccessory)
        let sink = EventRouter.SessionSink(continuation: continuation, status: status)
        let request = OpenRFCOMMChannel(device: device, channel: channel, uuid: uuid, reopen: reopen ? true : nil, security: security,
                                        coalesceMilliseconds: coalesce.map(L2CAPCoalescing.milliseconds(of:)))
        let (session, router) = (self.session, self.session.router)
        // Registered as its reply is read, before its first data can be (see openSession).
        let opening = Task {
            try await session.request(request, expecting: RFCOMMChannelOpened.self) { reply in
                guard let opened = try? reply.decode(RFCOMMChannelOpened.self) else { return }
                router.register(session: opened.channel.session, sink)
            }
        }
        do {
            let info = try await opening.value.channel
            let accessorySession = AccessorySession(id: info.session, protocol: "rfcomm:\(info.channel)", status: status, stream: stream, session: session)
            return RFCOMMChannel(info: info, stream: accessorySession)
        } catch {
            continuation.finish()
            throw error
        }
    }
}
