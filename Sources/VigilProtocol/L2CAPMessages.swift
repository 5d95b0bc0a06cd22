// L2CAP connection-oriented channels (CoreBluetooth's CBL2CAPChannel): a
// byte stream to a PSM on a connected peripheral (central role), or from a
// central to a PSM this side published (peripheral role). A channel is a
// session: its bytes arrive as `session.data` events naming its session log,
// are written with `write` and closed with `closeSession`, exactly
// as an accessory's (docs/protocol.md, "L2CAP channels").

/// Request: open a channel to `psm` on a peripheral this client is connected
/// to (`ble.connect`, and the link up). Reply: `L2CAPChannelOpened`, once the
/// peripheral accepted it. Errors: `notConnected`, `notFound` (the peripheral
/// has no channel on that PSM), `unavailable` (no Bluetooth), `invalidArgument`.
public struct OpenL2CAPChannel: Message, Equatable {
    public static let type = "ble.openL2CAPChannel"
    public var peripheral: String
    /// 1-255 (LE: 1-127 fixed, 128-255 dynamic).
    public var psm: Int
    /// Open the channel again whenever the link comes back after a loss
    /// (`ble.l2cap.reopened` then); default false: a lost link ends it.
    public var reopen: Bool?
    /// `low` (default), `medium`, `high`, `fips`: BT_SECURITY.
    public var security: String?
    /// The largest SDU this side accepts (23-65535; default 2048).
    public var receiveMTU: Int?
    /// How long the channel's bytes may wait to share a `session.data` event
    /// with what follows them, 0-1000 ms (default 100): fewer, larger events
    /// (less CPU per byte) against latency. 0: every read is announced at once.
    public var coalesceMilliseconds: Int?

    public init(peripheral: String, psm: Int, reopen: Bool? = nil, security: String? = nil, receiveMTU: Int? = nil,
                coalesceMilliseconds: Int? = nil) {
        self.peripheral = peripheral
        self.psm = psm
        self.reopen = reopen
        self.security = security
        self.receiveMTU = receiveMTU
        self.coalesceMilliseconds = coalesceMilliseconds
    }
}

/// The range of `coalesceMilliseconds` (`OpenL2CAPChannel`, `PublishL2CAPChannel`)
/// and its default.
public enum L2CAPCoalescing {
    public static let milliseconds: ClosedRange<Int> = 0...1000
    public static let defaultMilliseconds = 100

    /// A window as the protocol carries it: whole milliseconds, rounded to the
    /// nearest (a negative window stays negative, and the daemon refuses it).
    public static func milliseconds(of window: Duration) -> Int {
        let (seconds, attoseconds) = window.components
        guard abs(seconds) < 1_000_000_000 else { return seconds < 0 ? -1 : Int.max }
        return Int(seconds) * 1000 + Int((Double(attoseconds) / 1e15).rounded())
    }
}

/// A channel, as replies and events describe it.
public struct L2CAPChannelInfo: Sendable, Codable, Equatable {
    /// The session its bytes travel in (`session.data` events, `write`, `closeSession`).
    public var session: Int
    /// The other device: the peripheral (central role) or the central that opened it.
    public var peer: String
    public var psm: Int
    /// The largest SDU each side takes (a write is split at `sendMTU`).
    public var sendMTU: Int
    public var receiveMTU: Int

    public init(session: Int, peer: String, psm: Int, sendMTU: Int, receiveMTU: Int) {
        self.session = session
        self.peer = peer
        self.psm = psm
        self.sendMTU = sendMTU
        self.receiveMTU = receiveMTU
    }

    public var attributes: [String: JSONValue] {
        ["session": .number(Double(session)), "peer": .string(peer), "psm": .number(Double(psm)),
         "sendMTU": .number(Double(sendMTU)), "receiveMTU": .number(Double(receiveMTU))]
    }

    public init?(attributes: [String: JSONValue]) {
        guard let session = attributes["session"]?.numberValue.flatMap({ Int(exactly: $0) }),
              case let .string(peer)? = attributes["peer"],
              let psm = attributes["psm"]?.numberValue.flatMap({ Int(exactly: $0) }),
              let send = attributes["sendMTU"]?.numberValue.flatMap({ Int(exactly: $0) }),
              let receive = attributes["receiveMTU"]?.numberValue.flatMap({ Int(exactly: $0) })
        else { return nil }
        self.init(session: session, peer: peer, psm: psm, sendMTU: send, receiveMTU: receive)
    }
}

public struct L2CAPChannelOpened: Message, Equatable {
    public static let type = "reply"
    public var channel: L2CAPChannelInfo
    public init(channel: L2CAPChannelInfo) { self.channel = channel }
}

/// Request: listen for channels from centrals on `psm` (nil: a free dynamic
/// PSM, 128-255; advertise it, e.g. in a GATT characteristic). Each channel
/// a central opens is a `ble.l2cap.incoming` event (waking or relaunching
/// the app, `bluetooth-peripheral`). Reply: `L2CAPChannelPublished`. A PSM
/// another client published is refused (`invalidState`).
public struct PublishL2CAPChannel: Message, Equatable {
    public static let type = "ble.publishL2CAPChannel"
    public var psm: Int?
    public var security: String?
    public var receiveMTU: Int?
    /// As `OpenL2CAPChannel`'s, for every channel centrals open to this PSM.
    public var coalesceMilliseconds: Int?
    public init(psm: Int? = nil, security: String? = nil, receiveMTU: Int? = nil, coalesceMilliseconds: Int? = nil) {
        self.psm = psm
        self.security = security
        self.receiveMTU = receiveMTU
        self.coalesceMilliseconds = coalesceMilliseconds
    }
}

public struct L2CAPChannelPublished: Message, Equatable {
    public static let type = "reply"
    public var psm: Int
    public init(psm: Int) { self.psm = psm }
}

/// Request: stop listening on a PSM this client published (open channels
/// stay open). Reply: `Done`.
public struct UnpublishL2CAPChannel: Message, Equatable {
    public static let type = "ble.unpublishL2CAPChannel"
    public var psm: Int
    public init(psm: Int) { self.psm = psm }
}

/// Request: the PSMs published and the channels open or waiting to reopen,
/// every client's for a control client, its own for an app (`vigilctl ble
/// l2cap list`). Reply: `L2CAPList`. A channel's traffic is its session's
/// (`accessories` lists it with the serial sessions).
public struct ListL2CAP: Message, Equatable {
    public static let type = "ble.l2cap"
    public init() {}
}

public struct L2CAPList: Message, Equatable {
    public static let type = "reply"
    public var published: [PublishedL2CAP]
    public var channels: [L2CAPChannelStatus]
    public init(published: [PublishedL2CAP], channels: [L2CAPChannelStatus]) {
        self.published = published
        self.channels = channels
    }
}

/// A PSM vigild listens on for a client.
public struct PublishedL2CAP: Sendable, Codable, Equatable {
    public var psm: Int
    /// `app ID` or `vigilctl (connection N)`, as in `SessionInfo`.
    public var holder: String
    public var security: String?
    public var receiveMTU: Int
    public var coalesceMilliseconds: Int
    public init(psm: Int, holder: String, security: String?, receiveMTU: Int, coalesceMilliseconds: Int) {
        self.psm = psm
        self.holder = holder
        self.security = security
        self.receiveMTU = receiveMTU
        self.coalesceMilliseconds = coalesceMilliseconds
    }
}

/// A channel: `opening` (the peripheral has not accepted yet), `open`, or
/// `waiting` (opened with `reopen`, its link gone: it opens again when the
/// link is back).
public struct L2CAPChannelStatus: Sendable, Codable, Equatable {
    public var session: Int
    public var holder: String
    public var peer: String
    public var psm: Int
    public var state: String
    public var reopen: Bool
    public init(session: Int, holder: String, peer: String, psm: Int, state: String, reopen: Bool) {
        self.session = session
        self.holder = holder
        self.peer = peer
        self.psm = psm
        self.state = state
        self.reopen = reopen
    }
}

/// Event kinds of L2CAP channels (attributes: `L2CAPChannelInfo`). A channel's
/// bytes and its end are the session's own events (`session.data`,
/// `session.closed` with a `reason`, `session.loss`).
public enum L2CAPEventKind {
    /// A central opened a channel to a published PSM (`bluetooth-peripheral`).
    public static let incoming = "ble.l2cap.incoming"
    /// A channel opened with `reopen` is open again after its link came back
    /// (`bluetooth-central`); same session id.
    public static let reopened = "ble.l2cap.reopened"
    /// vigild no longer listens on a PSM the app published: after a daemon
    /// restart it could not listen on it again (attributes `psm`, `reason`;
    /// `bluetooth-peripheral`). Publish again, or pick another PSM.
    public static let unpublished = "ble.l2cap.unpublished"
}
