import VigilLifecycle
import VigilProtocol

/// `[mqtt]` in vigild.toml: the one broker connection vigild keeps for all
/// apps' push wakes and exports (docs/fleet.md). Without `broker` there is no
/// connection and no cost.
///
/// ```toml
/// [mqtt]
/// broker = "mqtts://broker.example.net:8883"   # tcp:// mqtt:// ssl:// mqtts://
/// client-id = "vigil-gw17"                      # default: "vigil-" + machine id (or host name)
/// username = "gw17"
/// password-file = "/etc/vigil/mqtt-password"     # read at start, never logged
/// ca-file = "/etc/ssl/certs/ca-certificates.crt"
/// cert-file = "/etc/vigil/gw17.crt"             # client certificate (PEM)
/// key-file = "/etc/vigil/gw17.key"
/// keepalive = 60                                # seconds
/// outbox-limit = 100000                         # messages held for the broker
/// outbox-size = 67108864                        # bytes held for the broker
/// ```
public struct MQTTSettings: Sendable, Equatable {
    public var broker: String?
    public var clientID: String?
    public var username: String?
    public var passwordFile: String?
    public var caFile: String?
    public var certificateFile: String?
    public var keyFile: String?
    public var keepAlive = 60
    public var outboxLimit = 100_000
    public var outboxSize = 64 << 20

    public init() {}

    /// Whether vigild connects to a broker.
    public var isEnabled: Bool { broker != nil }

    static let knownKeys: Set<String> = [
        "broker", "client-id", "username", "password-file", "ca-file", "cert-file", "key-file", "keepalive",
        "outbox-limit", "outbox-size",
    ]

    public enum Ranges {
        public static let keepAlive = 5...3600
        public static let outboxLimit = 1...10_000_000
        public static let outboxSize = 1024...(1 << 34)
    }

    static let schemes = ["tcp://", "mqtt://", "ssl://", "mqtts://"]

    static func parse(_ fields: TOMLFields, defaults: MQTTSettings, resolve: (String) -> String) throws(ManifestProblem) -> MQTTSettings {
        try fields.rejectUnknownKeys(allowed: knownKeys)
        var settings = defaults
        if let broker = try fields.string("broker") {
            guard schemes.contains(where: { broker.hasPrefix($0) }), broker.count > 8 else {
                throw fields.problem("broker", "'\(broker)' must be a URL starting with tcp://, mqtt://, ssl:// or mqtts:// (host and port)")
            }
            settings.broker = broker
        }
        if let id = try fields.string("client-id") {
            guard !id.isEmpty, id.utf8.count <= 65_535, !id.utf8.contains(0) else {
                throw fields.problem("client-id", "must be a non-empty string")
            }
            settings.clientID = id
        }
        settings.username = try fields.string("username") ?? defaults.username
        settings.passwordFile = try fields.string("password-file").map(resolve) ?? defaults.passwordFile
        settings.caFile = try fields.string("ca-file").map(resolve) ?? defaults.caFile
        settings.certificateFile = try fields.string("cert-file").map(resolve) ?? defaults.certificateFile
        settings.keyFile = try fields.string("key-file").map(resolve) ?? defaults.keyFile
        if (settings.certificateFile == nil) != (settings.keyFile == nil) {
            throw fields.problem(settings.certificateFile == nil ? "key-file" : "cert-file", "cert-file and key-file go together")
        }
        settings.keepAlive = try fields.integer("keepalive", in: Ranges.keepAlive) ?? defaults.keepAlive
        settings.outboxLimit = try fields.integer("outbox-limit", in: Ranges.outboxLimit) ?? defaults.outboxLimit
        settings.outboxSize = try fields.integer("outbox-size", in: Ranges.outboxSize) ?? defaults.outboxSize
        return settings
    }
}
