import ArgumentParser
import FoundationEssentials
import Glibc
import VigilKit

/// `vigilctl`: inspect and drive vigild from a shell, as the user (launch,
/// background, quit) or as the system (terminate, wake).
@main
struct Vigilctl: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "vigilctl",
        abstract: "Inspect and drive the Vigil daemon.",
        discussion: """
            Exit status: 0 success; 1 the daemon refused the request or the command failed (unknown app, \
            wrong state, an argument the daemon rejected, Bluetooth unavailable, ...); 64 usage error; \
            69 no daemon listens at the socket (or it went away); 77 refused: this user may not use the control \
            role or this request (see docs/security.md). With --json a failure is one JSON object on stderr: \
            {"error": {"code", "message", "exitStatus"}}.
            """,
        version: VigilVersion.current,
        subcommands: [
            Status.self, Apps.self,
            Launch.self, Background.self, Foreground.self, Quit.self, Terminate.self,
            Wake.self, Log.self, TimelineCommand.self, Reload.self,
            Accessories.self, Accessory.self, Ble.self,
        ]
    )

    @OptionGroup var options: GlobalOptions

    /// Failures are one line on stderr (JSON under --json) and a sysexits
    /// status (`Failure.Status`); usage errors keep ArgumentParser's messages.
    static func main() async {
        let json = CommandLine.arguments.dropFirst().contains("--json")
        do {
            var command = try await asyncParseAsRoot()
            if var command = command as? AsyncParsableCommand {
                try await command.run()
            } else {
                try command.run()
            }
        } catch {
            Failure.exit(error, json: json)
        }
    }
}

/// Options every subcommand accepts.
struct GlobalOptions: ParsableArguments {
    @Option(name: .long, help: "The daemon's socket (default: $VIGIL_SOCKET, else the per-user socket if that daemon runs, else /run/vigil/vigild.sock).")
    var socket: String?

    @Flag(name: .long, help: "Print the daemon's reply as JSON (and a failure as a JSON object on stderr).")
    var json = false

    /// Connects to the named socket; without one, to the per-user daemon and,
    /// when none listens there, to the system daemon (`DaemonSocket.candidates`).
    func connect() async throws -> ControlClient {
        var untried = DaemonSocket.candidates(explicit: socket)
        var absent: [String] = []
        while true {
            let path = untried.removeFirst()
            do {
                return try await ControlClient.connect(socketPath: path)
            } catch let error as ConnectionError where error.isNoDaemon {
                absent.append(path)
                guard untried.isEmpty else { continue }
                throw ConnectionError(path: absent.joined(separator: " or "), errno: error.errno)
            }
        }
    }
}
