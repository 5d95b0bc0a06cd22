/// The command line (hand-parsed: the examples have no ArgumentParser dependency).
struct BridgeOptions: Sendable, Equatable {
    /// `--address AA:BB:CC:DD:EE:FF`: connect to this monitor (a pending
    /// connect: it need not be in range). Without it, scan for the Heart Rate
    /// Service and take the first monitor found.
    var address: String?
    /// `--output FILE`: append the JSON lines to FILE. Default: standard output.
    var output: String?
    /// `--restore-id ID`: the central manager's restore identifier.
    var restoreIdentifier = BridgeOptions.defaultRestoreIdentifier
    /// `--republish`: publish a Heart Rate Service (0x180D) through vigild's
    /// peripheral role and notify each measurement received on 0x2A37.
    var republish = false
    /// `--serial-protocol PROTO`: take the measurements from the first serial
    /// accessory speaking PROTO (lines `hr=72 contact=1 energy=105 rr=812,799`)
    /// instead of a BLE monitor.
    var serialProtocol: String?
    /// `--location N`: the Body Sensor Location (0x2A38) the republished
    /// service answers, a fixed value (default 1, chest).
    var location = BodySensorLocation.chest
    /// `--mqtt TOPIC`: also publish each measurement line to TOPIC through
    /// vigild's broker connection (store-and-forward: kept on the gateway
    /// while the broker is unreachable). The manifest needs nothing more;
    /// vigild's config names the broker (docs/fleet.md).
    var mqttTopic: String?

    static let defaultRestoreIdentifier = "org.vigil.example.hrm-bridge"

    static let usage = """
        usage: vigil-hrm-bridge [--address ADDR | --serial-protocol PROTO] [--republish [--location N]]
                                [--output FILE] [--restore-id ID] [--mqtt TOPIC]

        Bridges a Bluetooth LE heart-rate monitor (Heart Rate Service 0x180D), or
        a serial heart-rate sensor, to JSON lines: one per measurement, plus
        connection, body sensor location and error lines; with --republish it is
        a heart-rate monitor itself, publishing 0x180D through vigild. Runs under
        vigild; its manifest declares background-modes: "bluetooth-central" for a
        BLE source, "external-accessory" (and accessory-protocols) for a serial
        one, "bluetooth-peripheral" with --republish (see the
        org.vigil.example.hrm-bridge*.toml files next to the sources).

          --address ADDR          connect to this monitor (default: scan for 0x180D,
                                  take the first found)
          --serial-protocol PROTO read measurements from the first serial accessory
                                  speaking PROTO (e.g. org.vigil.hrm), one line each:
                                  hr=72 contact=1 energy=105 rr=812,799
          --republish             publish 0x180D as "Vigil HRM Bridge": 0x2A37 notifies
                                  each measurement, 0x2A38 is fixed, 0x2A39 0x01 resets
                                  Energy Expended (at the source)
          --location N            Body Sensor Location published in 0x2A38, 0-255
                                  (default 1, chest)
          --output FILE           append JSON lines to FILE (default: standard output)
          --mqtt TOPIC            also publish each measurement line to TOPIC through
                                  vigild's MQTT broker connection (kept on the
                                  gateway while the broker is unreachable)
          --restore-id ID         restore identifier of the central and peripheral
                                  managers (default: \(defaultRestoreIdentifier))
          -h, --help              show this
        """

    enum ParseResult: Equatable {
        case run(BridgeOptions)
        case help
        case failure(String)
    }

    /// Parses the arguments after the program name: `--name value` or `--name=value`.
    static func parse(_ arguments: [String]) -> ParseResult {
        var options = BridgeOptions()
        var rest = arguments[...]
        while let argument = rest.popFirst() {
            if argument == "-h" || argument == "--help" { return .help }
            if argument == "--republish" {
                options.republish = true
                continue
            }
            var name = argument
            var inline: String?
            if argument.hasPrefix("--"), let equals = argument.firstIndex(of: "=") {
                name = String(argument[..<equals])
                inline = String(argument[argument.index(after: equals)...])
            }
            guard ["--address", "--output", "--restore-id", "--serial-protocol", "--location", "--mqtt"].contains(name) else {
                return .failure("unknown argument '\(argument)'")
            }
            guard let value = inline ?? rest.popFirst(), !value.isEmpty else {
                return .failure("\(name) needs a value")
            }
            switch name {
            case "--address":
                guard let address = normalizedAddress(value) else {
                    return .failure("--address '\(value)' is not a Bluetooth address (AA:BB:CC:DD:EE:FF)")
                }
                options.address = address
            case "--output": options.output = value
            case "--serial-protocol": options.serialProtocol = value
            case "--mqtt":
                guard !value.contains("+"), !value.contains("#") else {
                    return .failure("--mqtt '\(value)' is a topic filter: name one topic, without + or #")
                }
                options.mqttTopic = value
            case "--location":
                guard value.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }), let byte = UInt8(value) else {
                    return .failure("--location '\(value)' is not 0-255")
                }
                options.location = BodySensorLocation(rawValue: byte)
            default: options.restoreIdentifier = value
            }
        }
        if options.address != nil, options.serialProtocol != nil {
            return .failure("--address and --serial-protocol exclude each other")
        }
        return .run(options)
    }

    /// `aa:bb:cc:dd:ee:ff` or `AA-BB-...` as the daemon names peripherals: upper case, colons.
    static func normalizedAddress(_ text: String) -> String? {
        let parts = text.split(separator: text.contains("-") ? "-" : ":", omittingEmptySubsequences: false)
        guard parts.count == 6,
            parts.allSatisfy({ $0.count == 2 && $0.allSatisfy(\.isHexDigit) })
        else { return nil }
        return parts.joined(separator: ":").uppercased()
    }
}
