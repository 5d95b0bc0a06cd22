/// The five states of the background model (see docs/lifecycle.md).
public enum AppState: String, Sendable, Codable, CaseIterable {
    case notRunning
    case inactive
    case active
    case background
    case suspended

    /// Whether the app's processes may run code in this state.
    public var isRunning: Bool {
        switch self {
        case .inactive, .active, .background: true
        case .notRunning, .suspended: false
        }
    }

    /// Whether the app is in the foreground (not counting against background time).
    public var isForeground: Bool { self == .inactive || self == .active }
}

/// A background mode an app declares in its manifest.
public enum BackgroundMode: String, Sendable, Codable, CaseIterable {
    case externalAccessory = "external-accessory"
    case bluetoothCentral = "bluetooth-central"
    case bluetoothPeripheral = "bluetooth-peripheral"
    /// Background refresh: woken now and then to pull a little data (`RefreshMessages`).
    case fetch = "fetch"
    /// Push wakes: MQTT messages on the manifest's `mqtt-topics` (docs/fleet.md).
    case remoteNotification = "remote-notification"

    /// The mode an app needs to be woken for an event of `kind` (nil: any app
    /// may be, e.g. `test`), so a test wake obeys the rule of the real source.
    public init?(wakingFor kind: String) {
        if kind.hasPrefix("accessory.") || kind.hasPrefix("session.") {
            self = .externalAccessory
        } else if PeripheralEventContent.isPeripheralKind(kind) {
            self = .bluetoothPeripheral
        } else if BluetoothEventContent.isBluetoothKind(kind) {
            self = .bluetoothCentral
        } else if kind == RefreshEventKind.refresh {
            self = .fetch
        } else if kind.hasPrefix("mqtt.") {
            self = .remoteNotification
        } else {
            return nil
        }
    }
}

/// The state-transition notifications an app receives while it runs.
public enum LifecycleNotification: String, Sendable, Codable, CaseIterable {
    case didFinishLaunching
    case willResignActive
    case didEnterBackground
    case willEnterForeground
    case didBecomeActive
    case willTerminate
}

/// Why an app was started.
public enum LaunchReason: String, Sendable, Codable {
    /// The user launched it in the foreground.
    case user
    /// An event woke it while it was not running.
    case event
    /// Events it had received but not acknowledged when it died are redelivered.
    case redelivery
    /// The daemon restarted and found the app alive in its cgroup.
    case adopted
}

/// Launch options handed to the app in the handshake.
public struct LaunchOptions: Sendable, Codable, Equatable {
    public var reason: LaunchReason
    /// The kind of event that caused a background launch (e.g. `test`).
    public var eventKind: String?
    /// Restore identifiers of managers to restore (reserved for the Bluetooth roles).
    public var restoreIdentifiers: [String]

    public init(reason: LaunchReason, eventKind: String? = nil, restoreIdentifiers: [String] = []) {
        self.reason = reason
        self.eventKind = eventKind
        self.restoreIdentifiers = restoreIdentifiers
    }
}

/// How the daemon stops an app's processes from running.
public enum SuspensionMechanism: String, Sendable, Codable {
    /// cgroup v2 `cgroup.freeze`: the whole process tree, atomically.
    case cgroupFreezer = "cgroup"
    /// SIGSTOP/SIGCONT to the app's process group, where no cgroup can be had.
    case signals = "signal"
}

/// A background task held by an app.
public struct BackgroundTaskInfo: Sendable, Codable, Equatable {
    public var id: Int
    public var name: String

    public init(id: Int, name: String) {
        self.id = id
        self.name = name
    }
}

/// One entry of the decision log: what the daemon did to an app, and why.
/// A device that came or went, kept beside the decisions so a timeline can
/// show why apps were woken: an accessory plugged in or out, a Bluetooth LE
/// link up or down.
public struct DeviceRecord: Sendable, Codable, Equatable {
    /// Seconds since the Unix epoch.
    public var time: Double
    /// `accessory` or `bluetooth`.
    public var kind: String
    /// The accessory's name and serial number, or the peripheral's address.
    public var device: String
    /// `connected` or `disconnected`.
    public var change: String
    public var detail: String

    public init(time: Double, kind: String, device: String, change: String, detail: String) {
        self.time = time
        self.kind = kind
        self.device = device
        self.change = change
        self.detail = detail
    }
}

public struct DecisionRecord: Sendable, Codable, Equatable {
    /// Seconds since the Unix epoch.
    public var time: Double
    public var app: String
    public var action: String
    public var reason: String
    /// The app's state after the decision.
    public var state: AppState

    public init(time: Double, app: String, action: String, reason: String, state: AppState) {
        self.time = time
        self.app = app
        self.action = action
        self.reason = reason
        self.state = state
    }
}

/// What `vigilctl apps` shows for one app.
public struct AppInfo: Sendable, Codable, Equatable {
    public var id: String
    public var state: AppState
    public var pid: Int32?
    public var backgroundModes: [BackgroundMode]
    public var exitsOnSuspend: Bool
    /// Set by a user force-quit: events do not relaunch the app until the user launches it.
    public var forceQuit: Bool
    public var wakes: Int
    public var launches: Int
    /// Seconds spent running in the background, in total.
    public var backgroundTimeUsed: Double
    /// Seconds of background time left now; nil while in the foreground (infinite).
    public var backgroundTimeRemaining: Double?
    public var tasks: [BackgroundTaskInfo]
    /// Events waiting to be delivered, and delivered but not yet acknowledged.
    public var queuedEvents: Int
    public var unacknowledgedEvents: Int
    /// Events refused because the queue was full.
    public var droppedEvents: Int
    public var lastDecision: String?
    public var lastReason: String?
    public var launchReason: LaunchReason?
    /// The file the app's output goes to, or nil while it goes to the
    /// journal under `journalIdentifier` (`journalctl -t ID`).
    public var logPath: String?
    public var journalIdentifier: String?
    public var manifestPath: String
    /// Background refresh: seconds until the next one may come (it comes
    /// at most `refresh-coalescing` later), and the interval as stretched
    /// now; nil without a schedule.
    public var nextRefresh: Double?
    public var refreshInterval: Double?

    public init(
        id: String, state: AppState, pid: Int32?, backgroundModes: [BackgroundMode], exitsOnSuspend: Bool,
        forceQuit: Bool, wakes: Int, launches: Int, backgroundTimeUsed: Double, backgroundTimeRemaining: Double?,
        tasks: [BackgroundTaskInfo], queuedEvents: Int, unacknowledgedEvents: Int, droppedEvents: Int,
        lastDecision: String?, lastReason: String?, launchReason: LaunchReason?, logPath: String?, manifestPath: String
    ) {
        self.id = id
        self.state = state
        self.pid = pid
        self.backgroundModes = backgroundModes
        self.exitsOnSuspend = exitsOnSuspend
        self.forceQuit = forceQuit
        self.wakes = wakes
        self.launches = launches
        self.backgroundTimeUsed = backgroundTimeUsed
        self.backgroundTimeRemaining = backgroundTimeRemaining
        self.tasks = tasks
        self.queuedEvents = queuedEvents
        self.unacknowledgedEvents = unacknowledgedEvents
        self.droppedEvents = droppedEvents
        self.lastDecision = lastDecision
        self.lastReason = lastReason
        self.launchReason = launchReason
        self.logPath = logPath
        self.manifestPath = manifestPath
    }
}

extension AppInfo {
    /// Members without a value go out as `null` rather than being left out, so
    /// every client (and `vigilctl apps --json`) sees the full set of members
    /// docs/protocol.md lists.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(state, forKey: .state)
        try container.encode(pid, forKey: .pid)
        try container.encode(backgroundModes, forKey: .backgroundModes)
        try container.encode(exitsOnSuspend, forKey: .exitsOnSuspend)
        try container.encode(forceQuit, forKey: .forceQuit)
        try container.encode(wakes, forKey: .wakes)
        try container.encode(launches, forKey: .launches)
        try container.encode(backgroundTimeUsed, forKey: .backgroundTimeUsed)
        try container.encode(backgroundTimeRemaining, forKey: .backgroundTimeRemaining)
        try container.encode(tasks, forKey: .tasks)
        try container.encode(queuedEvents, forKey: .queuedEvents)
        try container.encode(unacknowledgedEvents, forKey: .unacknowledgedEvents)
        try container.encode(droppedEvents, forKey: .droppedEvents)
        try container.encode(lastDecision, forKey: .lastDecision)
        try container.encode(lastReason, forKey: .lastReason)
        try container.encode(launchReason, forKey: .launchReason)
        try container.encode(logPath, forKey: .logPath)
        try container.encode(journalIdentifier, forKey: .journalIdentifier)
        try container.encode(manifestPath, forKey: .manifestPath)
        try container.encode(nextRefresh, forKey: .nextRefresh)
        try container.encode(refreshInterval, forKey: .refreshInterval)
    }
}

/// A manifest the daemon refused, with the file and field at fault.
public struct ManifestProblem: Error, Sendable, Codable, Equatable, CustomStringConvertible {
    public var file: String
    public var field: String?
    public var message: String

    public init(file: String, field: String?, message: String) {
        self.file = file
        self.field = field
        self.message = message
    }

    public var description: String {
        if let field { return "\(file): field '\(field)': \(message)" }
        return "\(file): \(message)"
    }
}
