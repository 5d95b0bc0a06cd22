import VigilProtocol
import VigilSystem

/// An L2CAP connection-oriented channel, as `CBL2CAPChannel`: a byte stream to
/// a PSM on a peripheral the app is connected to (`Application.openL2CAPChannel`),
/// or from a central to a PSM the app published (`publishL2CAPChannel`, then
/// `l2capChannel(incoming:)` for each `ble.l2cap.incoming` event).
///
/// ```swift
/// let channel = try await app.openL2CAPChannel(peripheral: "C0:DE:00:00:00:20", psm: 0x80)
/// try await channel.write(firmwareImage)      // returns once the kernel took it all
/// for await chunk in channel.bytes {          // until the channel closes
///     try store(chunk)
///     await app.finishedProcessing()
/// }
/// ```
///
/// vigild holds the socket: the channel stays open while the app is
/// suspended, and what arrives wakes it (`bluetooth-central`, or
/// `bluetooth-peripheral` for channels to a published PSM). The bytes travel
/// as an accessory session's do (the channel's `session` id, its log, one
/// acknowledgement per chunk: see `AccessorySession`), so a chunk the app had
/// not finished when it died comes again. A channel opened with `reopen`
/// yields `.interrupted` when its link goes and goes on, same session, when
/// vigild has reopened it after the link came back (a `ble.l2cap.reopened`
/// event in `Application.events` says so).
public final class L2CAPChannel: BluetoothStreamChannel {
    public let info: L2CAPChannelInfo
    /// The stream underneath: `incoming`, `write`, `close` are its own.
    public let stream: AccessorySession

    init(info: L2CAPChannelInfo, stream: AccessorySession) {
        self.info = info
        self.stream = stream
    }

    public var peer: String { info.peer }
    public var psm: Int { info.psm }
    /// The largest SDU each way; writes of any length are cut at `sendMTU` by vigild.
    public var sendMTU: Int { info.sendMTU }
    public var receiveMTU: Int { info.receiveMTU }

    static let noAccessory = channelAccessory("L2CAP channel")
}

extension Application {
    /// Opens a channel to `psm` on a peripheral this app is connected to
    /// (`CentralManager.connect`, link up); returns once the peripheral
    /// accepted it. Throws `notConnected`, `notFound` (no channel on that
    /// PSM), `unavailable` (no Bluetooth), `invalidArgument`.
    /// - Parameters:
    ///   - reopen: open it again (same session) whenever the link comes back after a loss.
    ///   - security: `low` (default), `medium`, `high` or `fips`.
    ///   - coalesce: how long the channel's bytes may wait to share an event
    ///     with what follows (0-1 s, whole milliseconds; nil: the daemon's
    ///     100 ms). `.zero` for the lowest latency, at more events (CPU) per byte.
    public func openL2CAPChannel(
        peripheral: String, psm: Int, reopen: Bool = false, security: String? = nil, receiveMTU: Int? = nil,
        coalesce: Duration? = nil
    ) async throws -> L2CAPChannel {
        let request = OpenL2CAPChannel(peripheral: peripheral, psm: psm, reopen: reopen ? true : nil, security: security,
                                       receiveMTU: receiveMTU, coalesceMilliseconds: coalesce.map(L2CAPCoalescing.milliseconds(of:)))
        let (opened, stream) = try await openChannel(
            request, expecting: L2CAPChannelOpened.self, accessory: L2CAPChannel.noAccessory, session: { $0.channel.session },
            protocol: { "l2cap:\($0.channel.psm)" })
        return L2CAPChannel(info: opened.channel, stream: stream)
    }

    /// Listens for channels from centrals on `psm` (nil: a free dynamic one);
    /// returns the PSM (advertise it, e.g. in a characteristic). Each channel
    /// is a `ble.l2cap.incoming` event in `events`; `l2capChannel(incoming:)` makes it one.
    /// `coalesce`: as `openL2CAPChannel`'s, for every channel to this PSM.
    public func publishL2CAPChannel(
        psm: Int? = nil, security: String? = nil, receiveMTU: Int? = nil, coalesce: Duration? = nil
    ) async throws -> Int {
        let request = PublishL2CAPChannel(psm: psm, security: security, receiveMTU: receiveMTU,
                                          coalesceMilliseconds: coalesce.map(L2CAPCoalescing.milliseconds(of:)))
        return try await session.request(request, expecting: L2CAPChannelPublished.self).psm
    }

    public func unpublishL2CAPChannel(psm: Int) async throws {
        _ = try await session.request(UnpublishL2CAPChannel(psm: psm), expecting: Done.self)
    }

    /// The channel a `ble.l2cap.incoming` event announces. Its data is held
    /// from the moment the event was read, so nothing is missed; call it once
    /// per event (a second call returns nil).
    public func l2capChannel(incoming event: AppEvent) -> L2CAPChannel? {
        guard event.kind == L2CAPEventKind.incoming, let info = L2CAPChannelInfo(attributes: event.attributes),
              let stream = incomingChannelSession(info.session, protocol: "l2cap:\(info.psm)")
        else { return nil }
        return L2CAPChannel(info: info, stream: stream)
    }
}
