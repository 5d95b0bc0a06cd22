import VigilProtocol

/// What an app declares about itself: how to start it and which background
/// modes and accessory protocols it uses.
///
/// ```toml
/// id = "org.example.logger"
/// exec = ["/usr/bin/sensor-logger", "--db", "/var/lib/logger.db"]
/// background-modes = ["external-accessory"]
/// accessory-protocols = ["org.example.sensor"]
/// exits-on-suspend = false
/// working-directory = "/var/lib/logger"   # optional
/// user = "logger"                        # required by the system daemon (name or uid)
/// group = "logger"                       # optional: default the user's primary group
/// supplementary-groups = ["plugdev"]     # optional: default none
/// [environment]                          # optional
/// LOG_LEVEL = "debug"
/// ```
///
/// `user`, `group` and `supplementary-groups` are resolved when the app is
/// launched (docs/security.md says who may run as whom).
public struct AppManifest: Sendable, Equatable {
    public var id: String
    public var exec: [String]
    public var backgroundModes: Set<BackgroundMode>
    public var accessoryProtocols: [String]
    public var exitsOnSuspend: Bool
    public var workingDirectory: String?
    public var environment: [String: String]
    /// The user the app runs as; nil: the daemon's (only a per-user daemon allows that).
    public var user: AccountReference?
    /// Its primary group; nil: the user's primary group.
    public var group: AccountReference?
    /// Its supplementary groups; empty: none but the primary group.
    public var supplementaryGroups: [AccountReference]
    /// `remote-notification`: the MQTT topic filters whose messages wake it (docs/fleet.md).
    public var mqttTopics: [String] = []
    /// The file it was read from.
    public var path: String
    /// Set by `ManifestLoader`: the file and every folder above it are owned
    /// by root and writable by root only, which running an app as root (user,
    /// group or a supplementary group) requires.
    public var rootOwned = false
    /// Compiled into the daemon (the built-in demo), not read from a file: it
    /// runs as the daemon's user.
    public var isBuiltIn = false

    /// The most supplementary groups a manifest may name.
    public static let maximumSupplementaryGroups = 64

    public init(
        id: String, exec: [String], backgroundModes: Set<BackgroundMode> = [], accessoryProtocols: [String] = [],
        exitsOnSuspend: Bool = false, workingDirectory: String? = nil, environment: [String: String] = [:],
        user: AccountReference? = nil, group: AccountReference? = nil, supplementaryGroups: [AccountReference] = [],
        path: String = "<memory>"
    ) {
        self.id = id
        self.exec = exec
        self.backgroundModes = backgroundModes
        self.accessoryProtocols = accessoryProtocols
        self.exitsOnSuspend = exitsOnSuspend
        self.workingDirectory = workingDirectory
        self.environment = environment
        self.user = user
        self.group = group
        self.supplementaryGroups = supplementaryGroups
        self.path = path
    }

    /// Whether an event that needs `mode` may wake this app in the background.
    /// Events that need no mode (test events) wake every app.
    public func mayBeWoken(for mode: BackgroundMode?) -> Bool {
        guard let mode else { return true }
        return backgroundModes.contains(mode)
    }

    static let knownFields: Set<String> = [
        "id", "exec", "background-modes", "accessory-protocols", "exits-on-suspend", "working-directory", "environment",
        "user", "group", "supplementary-groups", "mqtt-topics",
    ]

    /// Parses and validates one manifest file's text.
    public static func parse(_ text: String, file: String) throws(ManifestProblem) -> AppManifest {
        try parse(Array(text.utf8), file: file)
    }

    /// The same for the file's bytes (invalid UTF-8 is refused with its place).
    public static func parse(_ bytes: [UInt8], file: String) throws(ManifestProblem) -> AppManifest {
        let fields = try TOMLFields.parse(bytes, file: file)
        try fields.rejectUnknownKeys(allowed: knownFields)

        let id = try fields.requiredString("id")
        guard ReverseDNS.isValid(id) else {
            throw fields.problem("id", "'\(id)' is not a reverse-DNS identifier (like org.example.app)")
        }
        guard let exec = try fields.stringArray("exec") else { throw fields.problem("exec", "is required") }
        guard let program = exec.first, !program.isEmpty else {
            throw fields.problem("exec", "must name a program as its first element")
        }
        var modes: Set<BackgroundMode> = []
        for (index, name) in (try fields.stringArray("background-modes") ?? []).enumerated() {
            guard let mode = BackgroundMode(rawValue: name) else {
                let known = BackgroundMode.allCases.map(\.rawValue).joined(separator: ", ")
                throw fields.problem("background-modes[\(index)]", "unknown mode '\(name)' (known: \(known))")
            }
            modes.insert(mode)
        }
        let protocols = try fields.stringArray("accessory-protocols") ?? []
        for (index, name) in protocols.enumerated() where !ReverseDNS.isValid(name) {
            throw fields.problem("accessory-protocols[\(index)]", "'\(name)' is not a reverse-DNS protocol string")
        }
        let topics = try fields.stringArray("mqtt-topics") ?? []
        for (index, topic) in topics.enumerated() {
            if let problem = MQTTTopic.problem(filter: topic) {
                throw fields.problem("mqtt-topics[\(index)]", "'\(topic)' is not an MQTT topic filter: it \(problem)")
            }
        }
        if !topics.isEmpty && !modes.contains(.remoteNotification) {
            throw fields.problem("mqtt-topics", "needs the 'remote-notification' background mode")
        }
        if topics.isEmpty && modes.contains(.remoteNotification) {
            throw fields.problem("background-modes", "'remote-notification' needs mqtt-topics (the topic filters that wake the app)")
        }
        let workingDirectory = try fields.string("working-directory")
        if let workingDirectory, !workingDirectory.hasPrefix("/") {
            throw fields.problem("working-directory", "must be an absolute path")
        }
        var manifest = AppManifest(
            id: id, exec: exec, backgroundModes: modes, accessoryProtocols: protocols,
            exitsOnSuspend: try fields.bool("exits-on-suspend") ?? false,
            workingDirectory: workingDirectory,
            environment: try fields.stringTable("environment") ?? [:],
            user: try fields.account("user"),
            group: try fields.account("group"),
            supplementaryGroups: try fields.accounts("supplementary-groups", limit: maximumSupplementaryGroups) ?? [],
            path: file)
        manifest.mqttTopics = topics
        return manifest
    }
}

/// Reverse-DNS names (`org.example.app`), used for app ids and protocol strings.
public enum ReverseDNS {
    public static func isValid(_ name: String) -> Bool {
        let labels = name.split(separator: ".", omittingEmptySubsequences: false)
        guard labels.count >= 2, name.utf8.count <= 255 else { return false }
        return labels.allSatisfy { label in
            guard let first = label.first, first.isASCII, first.isLetter || first.isNumber else { return false }
            return label.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") }
        }
    }
}
