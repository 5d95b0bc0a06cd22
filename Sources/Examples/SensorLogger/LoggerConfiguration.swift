import Foundation

/// The logger's settings, from environment variables (an app manifest sets them).
struct LoggerConfiguration: Sendable {
    /// `VIGIL_LOGGER_PROTOCOL`: the accessory protocol to open sessions for
    /// (the manifest must declare it in `accessory-protocols`). Default `org.vigil.sensor`.
    var protocolString: String
    /// `VIGIL_LOGGER_DB`: the SQLite database. Default
    /// `$XDG_STATE_HOME/vigil-sensor-logger/records.sqlite` (`~/.local/state` without XDG_STATE_HOME).
    var databasePath: String
    /// `VIGIL_LOGGER_STATS`: a JSON file rewritten with the counts after each batch.
    var statsPath: String?
    /// `VIGIL_LOGGER_LINE_SETTINGS`: line settings for the sessions, e.g. `"9600 8N1"`
    /// (default: the accessory's own, from udev or vigild's config).
    var lineSettings: String?
    /// `VIGIL_LOGGER_CRASH_AFTER_BATCH=N` (tests): abort right after committing
    /// the Nth batch, before acknowledging it, unless this process was handed
    /// redelivered data (so the relaunched process does not crash again).
    var crashAfterBatch: Int?
    /// `--mqtt TOPIC` or `VIGIL_LOGGER_MQTT_TOPIC`: also publish each batch's
    /// records to TOPIC through vigild's broker connection (store-and-forward,
    /// docs/fleet.md), as one JSON message per batch.
    var mqttTopic: String?
    /// `VIGIL_LOGGER_RUUVI=1`: also log RuuviTags (broadcast sensors, data
    /// format 5) through an advertisement monitor (`Broadcasts`); the
    /// manifest needs the `bluetooth-central` background mode.
    var ruuvi: Bool
    /// `VIGIL_LOGGER_TRACE`: a file to append each batch's step times to (`TraceFile`).
    var tracePath: String?

    init(environment: [String: String] = ProcessInfo.processInfo.environment, arguments: [String] = CommandLine.arguments) {
        func value(_ name: String) -> String? { environment[name].flatMap { $0.isEmpty ? nil : $0 } }
        protocolString = value("VIGIL_LOGGER_PROTOCOL") ?? "org.vigil.sensor"
        databasePath = value("VIGIL_LOGGER_DB") ?? Self.defaultDatabasePath(environment)
        statsPath = value("VIGIL_LOGGER_STATS")
        lineSettings = value("VIGIL_LOGGER_LINE_SETTINGS")
        crashAfterBatch = value("VIGIL_LOGGER_CRASH_AFTER_BATCH").flatMap(Int.init)
        mqttTopic = value("VIGIL_LOGGER_MQTT_TOPIC")
        ruuvi = value("VIGIL_LOGGER_RUUVI") == "1"
        tracePath = value("VIGIL_LOGGER_TRACE")
        if let flag = arguments.firstIndex(of: "--mqtt"), flag + 1 < arguments.count, !arguments[flag + 1].isEmpty {
            mqttTopic = arguments[flag + 1]
        }
    }

    static func defaultDatabasePath(_ environment: [String: String]) -> String {
        let state = environment["XDG_STATE_HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil }
            ?? (environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? NSHomeDirectory()) + "/.local/state"
        return state + "/vigil-sensor-logger/records.sqlite"
    }
}
