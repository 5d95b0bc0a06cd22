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
public final class RFCOMMChannel: BluetoothStreamChannel {
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

    static let noAccessory = channelAccessory("RFCOMM channel")
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
        let request = OpenRFCOMMChannel(device: device, channel: channel, uuid: uuid, reopen: reopen ? true : nil, security: security,
                                        coalesceMilliseconds: coalesce.map(L2CAPCoalescing.milliseconds(of:)))
        let (opened, stream) = try await openChannel(
            request, expecting: RFCOMMChannelOpened.self, accessory: RFCOMMChannel.noAccessory, session: { $0.channel.session },
            protocol: { "rfcomm:\($0.channel.channel)" })
        return RFCOMMChannel(info: opened.channel, stream: stream)
    }

    /// Publishes a serial port service (SPP server role): bluetoothd adds its
    /// SDP record and listens on the channel; each device that connects is a
    /// `bluetooth.rfcomm.incoming` event in `events` (waking or relaunching
    /// the app: it needs the `bluetooth-peripheral` background mode), which
    /// `rfcommChannel(incoming:)` makes a channel. Returns the UUID as
    /// registered (128-bit). The service stays while the app is suspended or
    /// not running and across daemon restarts, until `unpublishRFCOMMService`.
    /// Throws `invalidArgument`, `invalidState` (published by another
    /// client), `notPermitted` (no `bluetooth-peripheral` mode), `unavailable`.
    /// - Parameters:
    ///   - uuid: the service class (default 0x1101, Serial Port).
    ///   - channel: the server channel (1-30); nil: bluetoothd picks one.
    ///   - requireAuthentication: the device must be paired (an authenticated, encrypted link).
    @discardableResult
    public func publishRFCOMMService(
        uuid: String? = nil, channel: Int? = nil, name: String? = nil, requireAuthentication: Bool? = nil, coalesce: Duration? = nil
    ) async throws -> String {
        let request = PublishRFCOMMService(uuid: uuid, channel: channel, name: name, requireAuthentication: requireAuthentication,
                                           coalesceMilliseconds: coalesce.map(L2CAPCoalescing.milliseconds(of:)))
        return try await session.request(request, expecting: RFCOMMServicePublished.self).uuid
    }

    public func unpublishRFCOMMService(uuid: String) async throws {
        _ = try await session.request(UnpublishRFCOMMService(uuid: uuid), expecting: Done.self)
    }

    /// The channel a `bluetooth.rfcomm.incoming` event announces. Its data is
    /// held from the moment the event was read, so nothing is missed; call it
    /// once per event (a second call returns nil).
    public func rfcommChannel(incoming event: AppEvent) -> RFCOMMChannel? {
        guard event.kind == RFCOMMEventKind.incoming, let info = RFCOMMChannelInfo(attributes: event.attributes),
              let stream = incomingChannelSession(info.session, protocol: "rfcomm:\(info.channel)")
        else { return nil }
        return RFCOMMChannel(info: info, stream: stream)
    }
}
