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
