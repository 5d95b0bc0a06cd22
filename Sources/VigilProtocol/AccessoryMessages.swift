// Accessories: the model, and the messages of apps and control clients about them.

/// A connected accessory, as apps and `vigilctl accessories --json` see it.
public struct AccessoryInfo: Sendable, Codable, Equatable {
    /// New for every connection: a replugged accessory gets a new one.
    public var connectionID: UInt64
    public var name: String
    public var manufacturer: String
    public var modelNumber: String
    public var serialNumber: String
    public var firmwareRevision: String
    public var hardwareRevision: String
    /// Reverse-DNS protocol strings the accessory speaks.
    public var protocolStrings: [String]
    public var deviceNode: String
    /// USB ids as four lowercase hex digits ("1209"), empty for a plain UART.
    public var vendorID: String
    public var productID: String
    public var sysPath: String
    /// Line settings sessions use unless they ask otherwise, e.g. "115200 8N1 rtscts".
    public var lineSettings: String
    /// What the device node is: `"serial"` (a tty) or `"hid"` (a hidraw node,
    /// whose sessions carry whole reports: `SessionRecords`). Absent from
    /// older daemons, whose accessories are all serial.
    public var kind: String?

    public static let serialKind = "serial"
    public static let hidKind = "hid"

    /// A hidraw accessory: its sessions are record sessions of input reports.
    public var isHID: Bool { kind == Self.hidKind }

    public init(
        connectionID: UInt64, name: String, manufacturer: String, modelNumber: String, serialNumber: String,
        firmwareRevision: String, hardwareRevision: String, protocolStrings: [String], deviceNode: String,
        vendorID: String, productID: String, sysPath: String, lineSettings: String, kind: String? = nil
    ) {
        self.kind = kind
        self.connectionID = connectionID
        self.name = name
        self.manufacturer = manufacturer
        self.modelNumber = modelNumber
        self.serialNumber = serialNumber
        self.firmwareRevision = firmwareRevision
        self.hardwareRevision = hardwareRevision
        self.protocolStrings = protocolStrings
        self.deviceNode = deviceNode
        self.vendorID = vendorID
        self.productID = productID
        self.sysPath = sysPath
        self.lineSettings = lineSettings
    }
}

/// Request (app or control): the connected accessories. Reply: `AccessoryList`.
public struct ListAccessories: Message, Equatable {
    public static let type = "accessories"
    public init() {}
}

public struct AccessoryList: Message, Equatable {
    public static let type = "reply"
    public var accessories: [AccessoryInfo]
    /// Open sessions, for control clients (nil for apps).
    public var sessions: [SessionInfo]?
    /// What is wrong with the connected accessories, for control clients (nil for apps).
    public var problems: [AccessoryProblem]?
    public init(accessories: [AccessoryInfo], sessions: [SessionInfo]? = nil, problems: [AccessoryProblem]? = nil) {
        self.accessories = accessories
        self.sessions = sessions
        self.problems = problems
    }
}

/// Something wrong with a connected accessory, as `vigilctl accessories` shows it.
public struct AccessoryProblem: Sendable, Codable, Equatable {
    /// A protocol string the device declared was refused (not reverse-DNS); it is not offered for it.
    public static let refusedProtocol = "refusedProtocol"
    /// Another connected device claims the same identity (USB ids and serial number).
    public static let duplicateIdentity = "duplicateIdentity"

    public var connectionID: UInt64
    /// `refusedProtocol` or `duplicateIdentity`.
    public var problem: String
    /// For people; device-provided text in it is escaped.
    public var detail: String

    public init(connectionID: UInt64, problem: String, detail: String) {
        self.connectionID = connectionID
        self.problem = problem
        self.detail = detail
    }
}

/// An open session as `vigilctl accessories` shows it, with its loss counters.
public struct SessionInfo: Sendable, Codable, Equatable {
    public var session: Int
    public var connectionID: UInt64
    public var `protocol`: String
    /// `app ID` or `vigilctl (connection N)`.
    public var holder: String
    public var lineSettings: String
    public var bytesIn: UInt64
    public var bytesOut: UInt64
    /// Bytes read for the app and not yet acknowledged.
    public var bufferedBytes: Int
    /// The daemon stopped reading because the buffer is full (flow control holds the device).
    public var readingPaused: Bool
    /// Loss the kernel or UART reported (TIOCGICOUNT), where the driver counts it.
    public var overruns: Int
    public var parityErrors: Int
    public var frameErrors: Int

    public init(
        session: Int, connectionID: UInt64, protocol: String, holder: String, lineSettings: String, bytesIn: UInt64,
        bytesOut: UInt64, bufferedBytes: Int, readingPaused: Bool, overruns: Int, parityErrors: Int, frameErrors: Int
    ) {
        self.session = session
        self.connectionID = connectionID
        self.protocol = `protocol`
        self.holder = holder
        self.lineSettings = lineSettings
        self.bytesIn = bytesIn
        self.bytesOut = bytesOut
        self.bufferedBytes = bufferedBytes
        self.readingPaused = readingPaused
        self.overruns = overruns
        self.parityErrors = parityErrors
        self.frameErrors = frameErrors
    }
}

/// Request (app): start or stop receiving `accessory.connected` and
/// `accessory.disconnected` events. Reply: `Done`.
public struct RegisterForAccessoryNotifications: Message, Equatable {
    public static let type = "registerForAccessoryNotifications"
    public var enabled: Bool
    public init(enabled: Bool = true) { self.enabled = enabled }
}

/// Request (app, or control for a person's terminal): open a session with an
/// accessory for one of its protocols. Reply: `SessionOpened`.
public struct OpenSession: Message, Equatable {
    public static let type = "openSession"
    public var connectionID: UInt64
    public var `protocol`: String
    /// Line settings overriding the accessory's, e.g. "9600 7E1 xonxoff".
    public var lineSettings: String?
    /// Reopen the session by itself when the same accessory (USB ids and serial
    /// number) is plugged in again; the app gets `session.reopened`.
    public var reopen: Bool?

    public init(connectionID: UInt64, protocol: String, lineSettings: String? = nil, reopen: Bool? = nil) {
        self.connectionID = connectionID
        self.protocol = `protocol`
        self.lineSettings = lineSettings
        self.reopen = reopen
    }
}

public struct SessionOpened: Message, Equatable {
    public static let type = "reply"
    public var session: Int
    public var accessory: AccessoryInfo
    public init(session: Int, accessory: AccessoryInfo) {
        self.session = session
        self.accessory = accessory
    }
}

/// Request: write the frame body to the session. The reply (`BytesWritten`)
/// comes once the device side has taken every byte: that is the back-pressure.
public struct WriteToSession: Message, Equatable {
    public static let type = "write"
    public var session: Int
    public init(session: Int) { self.session = session }
}

public struct BytesWritten: Message, Equatable {
    public static let type = "reply"
    public var written: Int
    public init(written: Int) { self.written = written }
}

/// Request: close a session. Reply: `Done`.
public struct CloseSession: Message, Equatable {
    public static let type = "closeSession"
    public var session: Int
    public init(session: Int) { self.session = session }
}

/// Pushed to a control client's terminal session: bytes from the device, and
/// the session's end. (Apps receive the same as queued `event`s instead.)
public struct SessionData: Message, Equatable {
    public static let type = "sessionData"
    public var session: Int
    public init(session: Int) { self.session = session }
}

public struct SessionClosed: Message, Equatable {
    public static let type = "sessionClosed"
    public var session: Int
    public var reason: String
    /// The session was opened with `reopen` and waits for its accessory to
    /// return: its output follows again once it does (absent from daemons before it).
    public var willReopen: Bool?
    public init(session: Int, reason: String, willReopen: Bool? = nil) {
        self.session = session
        self.reason = reason
        self.willReopen = willReopen
    }
}

/// Request (control): push `accessoryEvent` messages on this connection as
/// accessories come and go. Reply: `AccessoryList` with the current ones.
public struct WatchAccessories: Message, Equatable {
    public static let type = "watchAccessories"
    public init() {}
}

public struct AccessoryEvent: Message, Equatable {
    public static let type = "accessoryEvent"
    /// `connected` or `disconnected`.
    public var change: String
    public var accessory: AccessoryInfo
    public init(change: String, accessory: AccessoryInfo) {
        self.change = change
        self.accessory = accessory
    }
}

/// Event kinds apps receive about accessories (all need `external-accessory`
/// to wake the app in the background).
public enum AccessoryEventKind {
    public static let connected = "accessory.connected"
    public static let disconnected = "accessory.disconnected"
    public static let data = "session.data"
    public static let closed = "session.closed"
    public static let reopened = "session.reopened"
    public static let loss = "session.loss"
    /// A watched modem line changed (`watchSessionLines`).
    public static let lines = "session.lines"
}
