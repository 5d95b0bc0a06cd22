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
}

public struct RFCOMMChannelOpened: Message, Equatable {
    public static let type = "reply"
    public var channel: RFCOMMChannelInfo
    public init(channel: RFCOMMChannelInfo) { self.channel = channel }
}

/// Event kinds of RFCOMM channels (attributes: `RFCOMMChannelInfo`). Bytes
/// and the end are the session's own events (`session.data`, `session.closed`).
public enum RFCOMMEventKind {
    /// A channel opened with `reopen` is open again (`bluetooth-central`); same session id.
    public static let reopened = "bluetooth.rfcomm.reopened"
}
