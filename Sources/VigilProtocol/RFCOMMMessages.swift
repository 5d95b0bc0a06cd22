// RFCOMM (Bluetooth Classic serial, SPP): a byte stream to a serial port
// service on a BR/EDR device BlueZ knows (paired, or at least discovered).
// A channel is a session, as an L2CAP channel's: its bytes arrive as
// `session.data` events, are written with `write` and closed with
// `closeSession` (docs/protocol.md, "RFCOMM channels").

/// Request: open an RFCOMM channel to `device`, on server channel `channel`
/// (1-30) or on the channel of the service `uuid` (an SPP service's UUID,
/// e.g. 0x1101, found through the device's SDP records). Exactly one of the
/// two. Reply: `RFCOMMChannelOpened` once the device accepted. Errors:
/// `invalidArgument` (address, channel, uuid, options), `notFound` (BlueZ
/// does not know the device; nothing listens on the channel; no such
/// service), `notConnected` (the device did not answer), `unavailable` (no
/// Bluetooth), `notPermitted` (security refused).
public struct OpenRFCOMMChannel: Message, Equatable {
    public static let type = "bluetooth.openRFCOMMChannel"
    public var device: String
    public var channel: Int?
    public var uuid: String?
    /// Connect again whenever the channel closes by itself (the link went,
    /// the device closed it), on the same session (`bluetooth.rfcomm.reopened`);
    /// default false: the first close ends the session.
    public var reopen: Bool?
    /// `low` (default), `medium`, `high`, `fips`: BT_SECURITY.
    public var security: String?
    /// As `OpenL2CAPChannel`'s: how long bytes may wait to share a
    /// `session.data` event, 0-1000 ms (default 100).
    public var coalesceMilliseconds: Int?

    public init(device: String, channel: Int? = nil, uuid: String? = nil, reopen: Bool? = nil, security: String? = nil,
                coalesceMilliseconds: Int? = nil) {
        self.device = device
        self.channel = channel
        self.uuid = uuid
        self.reopen = reopen
        self.security = security
        self.coalesceMilliseconds = coalesceMilliseconds
    }
}

/// An RFCOMM channel, as replies and events describe it.
public struct RFCOMMChannelInfo: Sendable, Codable, Equatable {
    /// The session its bytes travel in.
    public var session: Int
    /// The other device's address.
    public var peer: String
    /// The server channel (1-30).
    public var channel: Int

    public init(session: Int, peer: String, channel: Int) {
        self.session = session
        self.peer = peer
        self.channel = channel
    }

    public var attributes: [String: JSONValue] {
        ["session": .number(Double(session)), "peer": .string(peer), "channel": .number(Double(channel))]
    }

    public init?(attributes: [String: JSONValue]) {
        guard let session = attributes["session"]?.numberValue.flatMap({ Int(exactly: $0) }),
              case let .string(peer)? = attributes["peer"],
              let channel = attributes["channel"]?.numberValue.flatMap({ Int(exactly: $0) })
        else { return nil }
        self.init(session: session, peer: peer, channel: channel)
    }
}

public struct RFCOMMChannelOpened: Message, Equatable {
    public static let type = "reply"
    public var channel: RFCOMMChannelInfo
    public init(channel: RFCOMMChannelInfo) { self.channel = channel }
}

/// Request: publish a serial port service (SPP server role). bluetoothd
/// adds its SDP record (UUID, server channel, name) and listens on the
/// channel; every connection a remote device makes to it is a session of
/// this client, announced by a `bluetooth.rfcomm.incoming` event that wakes
/// or relaunches an app (`bluetooth-peripheral`). Reply:
/// `RFCOMMServicePublished`. The service stays while the app is suspended
/// or not running, and across vigild and bluetoothd restarts, until
/// `UnpublishRFCOMMService` or a force-quit. Errors: `invalidArgument`
/// (UUID, channel, name, options), `invalidState` (the UUID or the channel
/// is published already by another client), `unavailable` (no Bluetooth),
/// `deviceError` (bluetoothd refused the profile).
public struct PublishRFCOMMService: Message, Equatable {
    public static let type = "bluetooth.publishRFCOMMService"
    /// The service class UUID (default 0x1101, the Serial Port service).
    public var uuid: String?
    /// The server channel (1-30); nil: bluetoothd picks a free one.
    public var channel: Int?
    /// The service name in the SDP record (default "Vigil serial port").
    public var name: String?
    /// Require an authenticated, encrypted link (bluetoothd's
    /// `RequireAuthentication`): the device must pair first (through vigild's agent).
    public var requireAuthentication: Bool?
    /// As `OpenRFCOMMChannel`'s, for every channel to this service.
    public var coalesceMilliseconds: Int?

    public init(uuid: String? = nil, channel: Int? = nil, name: String? = nil, requireAuthentication: Bool? = nil,
                coalesceMilliseconds: Int? = nil) {
        self.uuid = uuid
        self.channel = channel
        self.name = name
        self.requireAuthentication = requireAuthentication
        self.coalesceMilliseconds = coalesceMilliseconds
    }
}

/// The reply to `PublishRFCOMMService`: the UUID as vigild registered it
/// (128-bit, lower case) and the channel asked for (nil: bluetoothd's choice,
/// which each incoming channel's `channel` names).
public struct RFCOMMServicePublished: Message, Equatable {
    public static let type = "reply"
    public var uuid: String
    public var channel: Int?
    public init(uuid: String, channel: Int?) {
        self.uuid = uuid
        self.channel = channel
    }
}

/// Request: withdraw a service this client published (its SDP record goes,
/// nothing more connects to it; channels open on it stay). Reply: `Done`.
/// Error: `notFound` (not published by this client).
public struct UnpublishRFCOMMService: Message, Equatable {
    public static let type = "bluetooth.unpublishRFCOMMService"
    public var uuid: String
    public init(uuid: String) { self.uuid = uuid }
}

/// Event kinds of RFCOMM channels (attributes: `RFCOMMChannelInfo`). Bytes
/// and the end are the session's own events (`session.data`, `session.closed`).
public enum RFCOMMEventKind {
    /// A channel opened with `reopen` is open again (`bluetooth-central`); same session id.
    public static let reopened = "bluetooth.rfcomm.reopened"
    /// A remote device connected to a published service: a new session of
    /// the publisher (`bluetooth-peripheral`). Attributes: `RFCOMMChannelInfo`
    /// and `uuid`, the service's.
    public static let incoming = "bluetooth.rfcomm.incoming"
    /// A published service bluetoothd would not take back after a vigild or
    /// bluetoothd restart (attributes `uuid`, `reason`).
    public static let unpublished = "bluetooth.rfcomm.unpublished"
}
