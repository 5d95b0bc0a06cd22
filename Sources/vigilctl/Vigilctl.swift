import ArgumentParser
import Foundation
import VigilKit

/// `vigilctl`: inspect and drive vigild from a shell, as the user (launch,
/// background, quit) or as the system (terminate, wake).
@main
struct Vigilctl: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "vigilctl",
        abstract: "Inspect and drive the Vigil daemon.",
        subcommands: [
            Status.self, Apps.self,
            Launch.self, Background.self, Foreground.self, Quit.self, Terminate.self,
            Wake.self, Log.self, Reload.self,
            Accessories.self, Accessory.self, Ble.self,
        ]
    )

    @OptionGroup var options: GlobalOptions

    /// Failures from the daemon or the socket are one line on stderr and exit
    /// code 1; usage errors keep ArgumentParser's own messages and codes.
    static func main() async {
        do {
            var command = try await asyncParseAsRoot()
            if var command = command as? AsyncParsableCommand {
                try await command.run()
            } else {
                try command.run()
            }
        } catch let error as ConnectionError {
            fail(error)
        } catch let error as ProtocolError {
            fail(error)
        } catch {
            exit(withError: error)
        }
    }

    private static func fail(_ error: some Error) -> Never {
        FileHandle.standardError.write(Data("vigilctl: \(error)\n".utf8))
        Foundation.exit(1)
    }
}

/// Options every subcommand accepts.
struct GlobalOptions: ParsableArguments {
    @Option(name: .long, help: "The daemon's socket (default: $VIGIL_SOCKET, the per-user socket, then /run/vigil/vigild.sock).")
    var socket: String?

    @Flag(name: .long, help: "Print the daemon's reply as JSON.")
    var json = false

    func connect() async throws -> ControlClient {
        try await ControlClient.connect(socketPath: socket)
    }
}
