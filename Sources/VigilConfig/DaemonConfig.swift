import VigilLifecycle
import FoundationEssentials
import Glibc
import VigilProtocol

/// Where apps' standard output and error go.
public enum AppOutputPreference: String, Sendable {
    /// The journal when the daemon's own standard error is the journal (it
    /// runs under systemd), else files.
    case automatic = "auto"
    /// A journal stream per app launch, the app id as its identifier.
    case journal
    /// `<log-dir>/<id>.log`, rotated at launch past `app-log-size`.
    case files
}

/// How the daemon should stop an app from running.
public enum SuspensionPreference: String, Sendable {
    /// The cgroup freezer where a writable cgroup v2 tree exists, else signals.
    case automatic = "auto"
    case cgroup
    case signal
}

/// What a daemon that stops for good (SIGTERM, SIGINT) does with its apps.
public enum StopPolicy: String, Sendable, CaseIterable {
    /// Thawed (or continued) and left running, for the next daemon to adopt.
    case leave
    /// Told `willTerminate`, given the exit grace, then killed (the whole
    /// cgroup or process group).
    case terminate
}

/// The daemon's configuration (`vigild.toml`). Every field has a default, so an
/// empty or missing file is valid. Numbers have ranges (`Ranges`); every key's
/// type, default and range are in docs/configuration.md.
///
/// ```toml
/// socket = "/run/vigil/vigild.sock"
/// manifest-dirs = ["/etc/vigil/apps", "/usr/share/vigil/apps"]
/// state-dir = "/var/lib/vigil"
/// log-dir = "/var/log/vigil"
/// cgroup-root = "/sys/fs/cgroup/unified/vigil"   # default: a "vigil" child of the daemon's own cgroup
/// suspension = "auto"                           # auto | cgroup | signal
/// on-stop = "leave"                             # leave | terminate: apps when the daemon stops
/// event-queue-limit = 1000
/// decision-log-size = 2000
/// session-buffer-limit = 1048576                # bytes per accessory session, see AccessoryRule
/// bluetooth = true                              # Bluetooth LE through BlueZ (system bus)
/// bluetooth-request-timeout = 20.0              # s an app has to answer a central's read or write
/// advertisement-buffer-limit = 1048576          # bytes of advertisements queued per app before loss is reported
/// bluetooth-adapter = "hci0"                    # the default adapter, by name or address (default: first by name, kept)
/// durability = "process"                        # process | power: what queued events and read bytes survive
/// control-group = "vigil"                       # system daemon: members may use the control role ("" = root only)
/// monitor-group = "vigil-monitor"               # system daemon: members may use its read-only requests
/// app-output = "auto"                           # auto | journal | files: where apps' stdout and stderr go
/// app-log-size = 8388608                        # bytes: an app's output file is rotated at launch past this
///
/// [timings]
/// suspend-grace = 5.0
/// wake-budget = 10.0
/// background-time-limit = 180.0
/// expiration-warning = 5.0
/// exit-grace = 5.0
/// launch-timeout = 20.0
/// relaunch-window = 60.0
/// relaunch-limit = 3
/// refresh-minimum-interval = 900.0
/// refresh-coalescing = 60.0
/// ```
public struct DaemonConfig: Sendable, Equatable {
    public var socket: String?
    public var manifestDirectories: [String]
    public var stateDirectory: String
    public var logDirectory: String
    public var cgroupRoot: String?
    public var suspension: SuspensionPreference = .automatic
    public var onStop: StopPolicy = .leave
    public var eventQueueLimit: Int = 1000
    public var decisionLogSize: Int = 2000
    public var timings = Timings()
    /// Accessories declared here rather than by udev rules.
    public var accessoryRules: [AccessoryRule] = []
    /// Bytes a session may hold for its app (read, not yet acknowledged) before
    /// the daemon stops reading and lets flow control hold the device back.
    public var sessionBufferLimit: Int = 1 << 20
    /// Whether to use BlueZ on the system bus (DBUS_SYSTEM_BUS_ADDRESS honoured).
    public var bluetooth = true
    /// Seconds an app has to answer a remote central's read or write (a wake
    /// or relaunch included) before the central gets an ATT error.
    public var bluetoothRequestTimeout = 20.0
    /// Bytes of advertisement records (`ble.monitor.advertisements`) an app's
    /// queue may hold unacknowledged; past it advertisements are dropped,
    /// counted and reported to the app (`lost`).
    public var advertisementBufferLimit = 1 << 20
    /// The default adapter, by name (`hci1`) or address; nil: the first by
    /// name when vigild first sees one, kept while it runs. Never replaced
    /// by another adapter when it is absent or powered off.
    public var bluetoothAdapter: String?
    /// What the event journal survives before the daemon relies on it:
    /// `process` a crash of vigild (page cache), `power` a power loss (fdatasync).
    public var durability: Durability = .process
    /// Whether this is the system daemon (`vigild --system`): apps run as the
    /// users their manifests name, and the control role is open to root and
    /// `controlGroup`. Not a key: the command line says it.
    public var systemMode: Bool
    /// System daemon: members of this group may use the control role (root always may); nil: root only.
    public var controlGroup: AccountReference?
    /// System daemon: members of this group may use the control role's
    /// read-only requests (status, apps, log, accessories, Bluetooth state and
    /// devices); nil: nobody beyond `controlGroup`.
    public var monitorGroup: AccountReference?
    /// Where apps' standard output and error go.
    public var appOutput: AppOutputPreference = .automatic
    /// With output to files: past this size, at the app's next launch, its
    /// file becomes `<id>.log.1` (replacing the one before) and a new one starts.
    public var appLogSize: Int = 8 << 20
    /// The metrics endpoint (Prometheus text over HTTP), off unless set: a
    /// Unix socket at this path, and/or this TCP port on 127.0.0.1.
    public var metricsSocket: String?
    public var metricsPort: Int?
    /// `[mqtt]`: the broker connection (`MQTTSettings`), off without `broker`.
    public var mqtt = MQTTSettings()

    /// Defaults for the system daemon or for a per-user daemon. The two read
    /// different shared folders, as systemd's system and user units do
    /// (`/etc/systemd/system`, `/etc/systemd/user`): a manifest for the system
    /// daemon must name a `user`, and a per-user daemon refuses one naming
    /// anybody else, so any manifest in a folder both read would be an error
    /// in one of them (every user's daemon rejecting `/etc/vigil/apps`).
    public init(system: Bool, environment: [String: String] = ProcessInfo.processInfo.environment) {
        systemMode = system
        controlGroup = system ? .name("vigil") : nil
        if system {
            manifestDirectories = ["/usr/share/vigil/apps", "/etc/vigil/apps"]
            stateDirectory = "/var/lib/vigil"
            logDirectory = "/var/log/vigil"
        } else {
            let home = environment["HOME"] ?? "/tmp"
            let config = environment["XDG_CONFIG_HOME"] ?? home + "/.config"
            let state = environment["XDG_STATE_HOME"] ?? home + "/.local/state"
            manifestDirectories = ["/usr/share/vigil/user-apps", "/etc/vigil/user-apps", config + "/vigil/apps"]
            stateDirectory = state + "/vigil"
            logDirectory = state + "/vigil/logs"
        }
    }

    static let knownFields: Set<String> = [
        "socket", "manifest-dirs", "state-dir", "log-dir", "cgroup-root", "suspension", "on-stop", "event-queue-limit",
        "decision-log-size", "timings", "accessory", "session-buffer-limit", "bluetooth",
        "bluetooth-request-timeout", "advertisement-buffer-limit", "bluetooth-adapter", "durability", "control-group", "monitor-group",
        "app-output", "app-log-size",
        "metrics-socket", "metrics-port", "mqtt",
    ]
    static let knownTimings: Set<String> = [
        "suspend-grace", "wake-budget", "background-time-limit", "expiration-warning", "exit-grace",
        "launch-timeout", "relaunch-window", "relaunch-limit", "refresh-minimum-interval", "refresh-coalescing",
    ]

    /// The range of every numeric key, in seconds for durations
    /// (docs/configuration.md). Bounded so that every duration
    /// converts to nanoseconds and every limit to memory the daemon can hold.
    public enum Ranges {
        public static let eventQueueLimit = 1...1_000_000
        public static let decisionLogSize = 1...100_000
        public static let sessionBufferLimit = 1024...(1 << 30)
        public static let bluetoothRequestTimeout: ClosedRange<Double> = 0.1...300
        public static let advertisementBufferLimit = 1024...(1 << 30)
        public static let suspendGrace: ClosedRange<Double> = 0.1...86_400
        public static let wakeBudget: ClosedRange<Double> = 0.1...86_400
        public static let backgroundTimeLimit: ClosedRange<Double> = 1...86_400
        /// Also below `background-time-limit`.
        public static let expirationWarning: ClosedRange<Double> = 0...86_400
        public static let exitGrace: ClosedRange<Double> = 0.1...3600
        public static let launchTimeout: ClosedRange<Double> = 0.1...3600
        public static let relaunchWindow: ClosedRange<Double> = 1...86_400
        public static let relaunchLimit = 1...1000
        public static let refreshMinimumInterval: ClosedRange<Double> = 0.1...604_800
        public static let refreshCoalescing: ClosedRange<Double> = 0...3600
        public static let appLogSize = 65_536...(1 << 40)
        public static let metricsPort = 1...65_535
    }

    /// Applies a config file's settings over `defaults`. Relative paths are taken
    /// relative to the file's directory.
    public static func parse(_ text: String, file: String, defaults: DaemonConfig) throws(ManifestProblem) -> DaemonConfig {
        try parse(Array(text.utf8), file: file, defaults: defaults)
    }

    /// The same for the file's bytes (invalid UTF-8 is refused with its place).
    public static func parse(_ bytes: [UInt8], file: String, defaults: DaemonConfig) throws(ManifestProblem) -> DaemonConfig {
        let fields = try TOMLFields.parse(bytes, file: file)
        try fields.rejectUnknownKeys(allowed: knownFields)
        let base = parentDirectory(of: file)
        func resolve(_ path: String) -> String { path.hasPrefix("/") ? path : base + "/" + path }

        var config = defaults
        config.socket = try fields.string("socket").map(resolve) ?? defaults.socket
        config.manifestDirectories = try fields.stringArray("manifest-dirs")?.map(resolve) ?? defaults.manifestDirectories
        config.stateDirectory = try fields.string("state-dir").map(resolve) ?? defaults.stateDirectory
        config.logDirectory = try fields.string("log-dir").map(resolve) ?? defaults.logDirectory
        config.cgroupRoot = try fields.string("cgroup-root").map(resolve) ?? defaults.cgroupRoot
        if let name = try fields.string("suspension") {
            guard let preference = SuspensionPreference(rawValue: name) else {
                throw fields.problem("suspension", "must be one of auto, cgroup, signal")
            }
            config.suspension = preference
        }
        if let name = try fields.string("on-stop") {
            guard let policy = StopPolicy(rawValue: name) else {
                throw fields.problem("on-stop", "is \"\(name)\", must be one of leave, terminate")
            }
            config.onStop = policy
        }
        config.eventQueueLimit = try fields.integer("event-queue-limit", in: Ranges.eventQueueLimit) ?? defaults.eventQueueLimit
        config.decisionLogSize = try fields.integer("decision-log-size", in: Ranges.decisionLogSize) ?? defaults.decisionLogSize
        config.sessionBufferLimit =
            try fields.integer("session-buffer-limit", in: Ranges.sessionBufferLimit) ?? defaults.sessionBufferLimit
        config.bluetooth = try fields.bool("bluetooth") ?? defaults.bluetooth
        config.bluetoothRequestTimeout =
            try fields.seconds("bluetooth-request-timeout", in: Ranges.bluetoothRequestTimeout) ?? defaults.bluetoothRequestTimeout
        config.advertisementBufferLimit =
            try fields.integer("advertisement-buffer-limit", in: Ranges.advertisementBufferLimit) ?? defaults.advertisementBufferLimit
        if let adapter = try fields.string("bluetooth-adapter") {
            guard Self.isAdapterName(adapter) else {
                throw fields.problem("bluetooth-adapter", "is \"\(adapter)\", must name an adapter: hciN or its address AA:BB:CC:DD:EE:FF")
            }
            config.bluetoothAdapter = adapter
        }
        if let name = try fields.string("durability") {
            guard let durability = Durability(rawValue: name) else {
                throw fields.problem("durability", "must be one of process, power")
            }
            config.durability = durability
        }
        if let name = try fields.string("app-output") {
            guard let preference = AppOutputPreference(rawValue: name) else {
                throw fields.problem("app-output", "is \"\(name)\", must be one of auto, journal, files")
            }
            config.appOutput = preference
        }
        config.appLogSize = try fields.integer("app-log-size", in: Ranges.appLogSize) ?? defaults.appLogSize
        config.metricsSocket = try fields.string("metrics-socket").map(resolve) ?? defaults.metricsSocket
        config.metricsPort = try fields.integer("metrics-port", in: Ranges.metricsPort) ?? defaults.metricsPort
        config.controlGroup = try fields.optionalGroup("control-group", default: defaults.controlGroup)
        config.monitorGroup = try fields.optionalGroup("monitor-group", default: defaults.monitorGroup)
        var rules: [AccessoryRule] = []
        for rule in try fields.tableArray("accessory") { rules.append(try AccessoryRule.parse(rule)) }
        config.accessoryRules = rules.isEmpty ? defaults.accessoryRules : rules
        if let mqtt = try fields.subtable("mqtt") {
            config.mqtt = try MQTTSettings.parse(mqtt, defaults: defaults.mqtt, resolve: resolve)
        }
        if let timings = try fields.subtable("timings") {
            try timings.rejectUnknownKeys(allowed: knownTimings)
            var t = defaults.timings
            t.suspendGrace = try timings.seconds("suspend-grace", in: Ranges.suspendGrace) ?? t.suspendGrace
            t.wakeBudget = try timings.seconds("wake-budget", in: Ranges.wakeBudget) ?? t.wakeBudget
            t.backgroundTimeLimit =
                try timings.seconds("background-time-limit", in: Ranges.backgroundTimeLimit) ?? t.backgroundTimeLimit
            t.expirationWarning = try timings.seconds("expiration-warning", in: Ranges.expirationWarning) ?? t.expirationWarning
            t.exitGrace = try timings.seconds("exit-grace", in: Ranges.exitGrace) ?? t.exitGrace
            t.launchTimeout = try timings.seconds("launch-timeout", in: Ranges.launchTimeout) ?? t.launchTimeout
            t.relaunchWindow = try timings.seconds("relaunch-window", in: Ranges.relaunchWindow) ?? t.relaunchWindow
            t.relaunchLimit = try timings.integer("relaunch-limit", in: Ranges.relaunchLimit) ?? t.relaunchLimit
            t.refreshMinimumInterval =
                try timings.seconds("refresh-minimum-interval", in: Ranges.refreshMinimumInterval) ?? t.refreshMinimumInterval
            t.refreshCoalescing = try timings.seconds("refresh-coalescing", in: Ranges.refreshCoalescing) ?? t.refreshCoalescing
            guard t.expirationWarning < t.backgroundTimeLimit else {
                throw timings.problem(
                    "expiration-warning",
                    "\(TOMLFields.show(t.expirationWarning)) must be shorter than background-time-limit (\(TOMLFields.show(t.backgroundTimeLimit)))")
            }
            config.timings = t
        }
        return config
    }

    /// Reads `file`; a missing file at the default location is not an error.
    public static func load(file: String, defaults: DaemonConfig, required: Bool) throws(ManifestProblem) -> DaemonConfig {
        guard FileManager.default.fileExists(atPath: file) else {
            if required { throw ManifestProblem(file: file, field: nil, message: "no such file") }
            return defaults
        }
        return try parse(try ConfigFile.bytes(file), file: file, defaults: defaults)
    }
}

extension DaemonConfig {
    /// `hciN`, or a Bluetooth address (six pairs of hex digits).
    static func isAdapterName(_ text: String) -> Bool {
        if text.hasPrefix("hci"), text.count > 3, text.dropFirst(3).allSatisfy({ $0.isASCII && $0.isNumber }) { return true }
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        return parts.count == 6 && parts.allSatisfy { $0.count == 2 && $0.allSatisfy(\.isHexDigit) }
    }
}
