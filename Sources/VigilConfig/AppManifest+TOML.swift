import VigilLifecycle
import VigilProtocol

/// A manifest file read and checked (TOML): the engine's `AppManifest`
/// knows nothing of the format.
extension AppManifest {
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
