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

    static let defaultRestoreIdentifier = "org.vigil.example.hrm-bridge"

    static let usage = """
        usage: vigil-hrm-bridge [--address ADDR] [--output FILE] [--restore-id ID]

        Bridges a Bluetooth LE heart-rate monitor (Heart Rate Service 0x180D) to
        JSON lines: one per measurement (0x2A37 notification), plus connection,
        body sensor location and error lines. Runs under vigild; its manifest
        must declare background-modes = ["bluetooth-central"] (see
        org.vigil.example.hrm-bridge.toml next to the sources).

          --address ADDR    connect to this monitor (default: scan for 0x180D,
                            take the first found)
          --output FILE     append JSON lines to FILE (default: standard output)
          --restore-id ID   restore identifier of the central manager
                            (default: \(defaultRestoreIdentifier))
          -h, --help        show this
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
            var name = argument
            var inline: String?
            if argument.hasPrefix("--"), let equals = argument.firstIndex(of: "=") {
                name = String(argument[..<equals])
                inline = String(argument[argument.index(after: equals)...])
            }
            guard ["--address", "--output", "--restore-id"].contains(name) else {
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
            default: options.restoreIdentifier = value
            }
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
