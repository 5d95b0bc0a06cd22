// Serial line control on an accessory session: the modem lines, breaks and
// RS-485 (docs/protocol.md, "Serial line control").

/// The modem lines of a serial session: DTR and RTS are driven by the
/// daemon for the holder, CTS, DSR, DCD and RI by the device.
public struct SessionLines: Sendable, Codable, Equatable {
    public var dtr: Bool
    public var rts: Bool
    public var cts: Bool
    public var dsr: Bool
    public var dcd: Bool
    public var ri: Bool

    public init(dtr: Bool = false, rts: Bool = false, cts: Bool = false, dsr: Bool = false, dcd: Bool = false, ri: Bool = false) {
        self.dtr = dtr
        self.rts = rts
        self.cts = cts
        self.dsr = dsr
        self.dcd = dcd
        self.ri = ri
    }

    /// The lines as event attributes (`session.lines`).
    public var attributes: [String: JSONValue] {
        ["dtr": .bool(dtr), "rts": .bool(rts), "cts": .bool(cts), "dsr": .bool(dsr), "dcd": .bool(dcd), "ri": .bool(ri)]
    }

    public init(attributes: [String: JSONValue]) {
        self.init(
            dtr: attributes["dtr"] == .bool(true), rts: attributes["rts"] == .bool(true),
            cts: attributes["cts"] == .bool(true), dsr: attributes["dsr"] == .bool(true),
            dcd: attributes["dcd"] == .bool(true), ri: attributes["ri"] == .bool(true))
    }
}

/// Request: set DTR and/or RTS (members left out stay as they are), then
/// read every line. An empty request only reads. Reply: `SessionLinesReply`.
/// Errors: `invalidArgument` (no such session held by this client),
/// `invalidState` (waiting for its accessory), `notSupported` (the driver has
/// no modem lines: a pty, a plain UART without them).
public struct SetSessionLines: Message, Equatable {
    public static let type = "sessionLines"
    public var session: Int
    public var dtr: Bool?
    public var rts: Bool?
    public init(session: Int, dtr: Bool? = nil, rts: Bool? = nil) {
        self.session = session
        self.dtr = dtr
        self.rts = rts
    }
}

public struct SessionLinesReply: Message, Equatable {
    public static let type = "reply"
    public var lines: SessionLines
    public init(lines: SessionLines) { self.lines = lines }
}

/// Request: hold the line at space for `milliseconds` (1 to 10000). The
/// reply (`Done`) comes when the break has ended; writes meanwhile wait in
/// the driver. Breaks of one session do not overlap (`invalidState`).
public struct SendBreak: Message, Equatable {
    public static let type = "sendBreak"
    public static let milliseconds = 1...10_000
    public var session: Int
    public var milliseconds: Int
    public init(session: Int, milliseconds: Int) {
        self.session = session
        self.milliseconds = milliseconds
    }
}

/// Request: report changes of CTS, DSR, DCD and RI as `session.lines`
/// events (`enabled: false` stops). `wake`: whether a change wakes (or
/// relaunches) a suspended app; without it a change waits, coalesced with
/// later ones, until the app runs anyway. `intervalMilliseconds`: how often
/// the daemon samples the driver's counters (10 to 1000, default 20).
/// Reply: `SessionLinesReply` (the lines now).
public struct WatchSessionLines: Message, Equatable {
    public static let type = "watchSessionLines"
    public static let intervals = 10...1000
    public var session: Int
    public var enabled: Bool
    public var wake: Bool?
    public var intervalMilliseconds: Int?
    public init(session: Int, enabled: Bool = true, wake: Bool? = nil, intervalMilliseconds: Int? = nil) {
        self.session = session
        self.enabled = enabled
        self.wake = wake
        self.intervalMilliseconds = intervalMilliseconds
    }
}

/// Pushed to a control client that watches a session's lines: as the
/// `session.lines` event apps get.
public struct SessionLinesChanged: Message, Equatable {
    public static let type = "sessionLinesChanged"
    public var session: Int
    public var lines: SessionLines
    /// The input lines that changed at least once since the last report
    /// ("cts", "dsr", "dcd", "ri"): a pulse shorter than the sampling
    /// interval is named although the line is back where it was.
    public var changed: [String]
    public init(session: Int, lines: SessionLines, changed: [String]) {
        self.session = session
        self.lines = lines
        self.changed = changed
    }
}

/// RS-485 half-duplex settings as the protocol carries them (delays in ms).
public struct RS485Config: Sendable, Codable, Equatable {
    public var enabled: Bool
    public var rtsOnSend: Bool?
    public var rtsAfterSend: Bool?
    public var delayBeforeSend: Int?
    public var delayAfterSend: Int?
    public var receiveDuringSend: Bool?

    public init(
        enabled: Bool, rtsOnSend: Bool? = nil, rtsAfterSend: Bool? = nil, delayBeforeSend: Int? = nil,
        delayAfterSend: Int? = nil, receiveDuringSend: Bool? = nil
    ) {
        self.enabled = enabled
        self.rtsOnSend = rtsOnSend
        self.rtsAfterSend = rtsAfterSend
        self.delayBeforeSend = delayBeforeSend
        self.delayAfterSend = delayAfterSend
        self.receiveDuringSend = receiveDuringSend
    }
}

/// Request: apply RS-485 settings (TIOCSRS485). Reply: `RS485Reply`, what
/// the driver took. `notSupported` where the driver has no RS-485 mode.
public struct SetSessionRS485: Message, Equatable {
    public static let type = "sessionRS485"
    public var session: Int
    public var rs485: RS485Config
    public init(session: Int, rs485: RS485Config) {
        self.session = session
        self.rs485 = rs485
    }
}

public struct RS485Reply: Message, Equatable {
    public static let type = "reply"
    public var rs485: RS485Config
    public init(rs485: RS485Config) { self.rs485 = rs485 }
}
