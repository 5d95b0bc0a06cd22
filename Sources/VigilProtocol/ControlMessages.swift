// Requests of the control role (vigilctl, test rigs) and their replies.

/// Request: daemon status. Reply: `DaemonStatus`.
public struct StatusRequest: Message, Equatable {
    public static let type = "status"
    public init() {}
}

public struct DaemonStatus: Message, Equatable {
    public static let type = "reply"
    public var daemon: String
    public var pid: Int32
    public var protocolVersion: Int
    public var socket: String
    public var suspension: SuspensionMechanism
    /// Why this mechanism (e.g. why the cgroup freezer could not be used).
    public var suspensionDetail: String
    public var cgroupRoot: String?
    public var apps: Int
    public var manifestProblems: [ManifestProblem]
    public var timings: [String: Double]
    public var uptime: Double
    /// What stopping the daemon does with its apps: `leave` or `terminate`.
    public var onStop: String?
    /// The port keeper, as words (holding, not started, disabled).
    public var portKeeper: String?
    /// Whether Bluetooth is usable, and why not (absent from older daemons).
    public var bluetooth: BluetoothHealth?
    /// Whether udev discovery and hot-plug work (absent from older daemons).
    public var udev: UdevHealth?
    /// The MQTT broker connection (absent without `[mqtt] broker`).
    public var mqtt: MQTTHealth?

    public init(
        daemon: String, pid: Int32, protocolVersion: Int, socket: String, suspension: SuspensionMechanism,
        suspensionDetail: String, cgroupRoot: String?, apps: Int, manifestProblems: [ManifestProblem],
        timings: [String: Double], uptime: Double, onStop: String? = nil, portKeeper: String? = nil,
        bluetooth: BluetoothHealth? = nil, udev: UdevHealth? = nil
    ) {
        self.daemon = daemon
        self.pid = pid
        self.protocolVersion = protocolVersion
        self.socket = socket
        self.suspension = suspension
        self.suspensionDetail = suspensionDetail
        self.cgroupRoot = cgroupRoot
        self.apps = apps
        self.manifestProblems = manifestProblems
        self.timings = timings
        self.uptime = uptime
        self.onStop = onStop
        self.portKeeper = portKeeper
        self.bluetooth = bluetooth
        self.udev = udev
    }
}

/// Request: every known app. Reply: `AppList`.
public struct ListApps: Message, Equatable {
    public static let type = "apps"
    public init() {}
}

public struct AppList: Message, Equatable {
    public static let type = "reply"
    public var apps: [AppInfo]
    public init(apps: [AppInfo]) { self.apps = apps }
}

/// The user's actions on one app. Reply: `AppReply` with the app after the action.
public enum UserAction: String, Codable, Sendable, CaseIterable {
    /// Launch in (or bring to) the foreground.
    case launch
    /// Leave the foreground, as pressing Home.
    case background
    /// Bring a background or suspended app back to the foreground.
    case foreground
    /// Force-quit by the user: no relaunch by events until the user launches it again.
    case quit
    /// Termination by the system (as under memory pressure): events may relaunch it.
    case terminate
}

public struct AppActionRequest: Message, Equatable {
    public static let type = "appAction"
    public var action: UserAction
    public var app: String
    public init(action: UserAction, app: String) {
        self.action = action
        self.app = app
    }
}

public struct AppReply: Message, Equatable {
    public static let type = "reply"
    public var app: AppInfo
    public init(app: AppInfo) { self.app = app }
}

/// Request: deliver an event to an app through the same path accessories and
/// Bluetooth use. The frame body is the event's payload. Reply: `EventAccepted`.
public struct WakeRequest: Message, Equatable {
    public static let type = "wake"
    public var app: String
    public var kind: String?
    public var attributes: [String: JSONValue]?
    public init(app: String, kind: String? = nil, attributes: [String: JSONValue]? = nil) {
        self.app = app
        self.kind = kind
        self.attributes = attributes
    }
}

public struct EventAccepted: Message, Equatable {
    public static let type = "reply"
    public var seq: UInt64
    /// What the daemon did: `delivered`, `woke`, `launched`, `queued`.
    public var disposition: String
    public init(seq: UInt64, disposition: String) {
        self.seq = seq
        self.disposition = disposition
    }
}

/// Request: the decision log, newest last. Reply: `DecisionLog`.
public struct LogRequest: Message, Equatable {
    public static let type = "log"
    public var app: String?
    public var limit: Int?
    /// Only decisions at or after this time (seconds since the Unix epoch).
    public var since: Double?
    /// After the reply, push each new decision (matching `app`) as a `decision` frame.
    public var follow: Bool?
    public init(app: String? = nil, limit: Int? = nil, since: Double? = nil, follow: Bool? = nil) {
        self.app = app
        self.limit = limit
        self.since = since
        self.follow = follow
    }
}

/// Pushed to a control client that asked `log` with `follow`: one new decision.
public struct DecisionPushed: Message, Equatable {
    public static let type = "decision"
    public var decision: DecisionRecord
    public init(decision: DecisionRecord) { self.decision = decision }
}

public struct DecisionLog: Message, Equatable {
    public static let type = "reply"
    public var decisions: [DecisionRecord]
    /// Devices that came and went in the same period (absent when the
    /// request named an app, and from daemons before device records).
    public var devices: [DeviceRecord]?
    public init(decisions: [DecisionRecord], devices: [DeviceRecord]? = nil) {
        self.decisions = decisions
        self.devices = devices
    }
}

/// Request: reread the manifest directories. Reply: `ReloadResult`.
public struct ReloadRequest: Message, Equatable {
    public static let type = "reload"
    public init() {}
}

public struct ReloadResult: Message, Equatable {
    public static let type = "reply"
    public var apps: [String]
    public var problems: [ManifestProblem]
    public init(apps: [String], problems: [ManifestProblem]) {
        self.apps = apps
        self.problems = problems
    }
}
