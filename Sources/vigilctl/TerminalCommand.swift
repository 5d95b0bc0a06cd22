import ArgumentParser
import VigilKit

/// `vigilctl accessory open`: a terminal onto an accessory, for manual
/// hardware work. stdin goes to the device, each chunk's write awaited before
/// the next is read, so a fast producer on stdin is held back at the device's
/// pace; the device's bytes go to stdout raw. Ends at EOF on stdin, once every
/// write is done (exit 0), or when the session ends otherwise (the reason on
/// stderr, exit 1).
struct AccessoryOpen: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "open",
        abstract: "A terminal onto an accessory: stdin to the device, the device to stdout."
    )

    @OptionGroup var options: GlobalOptions

    @Argument(help: "The accessory's connection id, as `vigilctl accessories` lists it.")
    var connectionID: UInt64

    @Option(name: .customLong("protocol"), help: "One of the accessory's protocol strings.")
    var protocolString: String

    @Option(help: ArgumentHelp("Line settings overriding the accessory's.", valueName: "\"9600 8N1\""))
    var lineSettings: String?

    func run() async throws {
        let client = try await options.connect()
        let session = try await client.openSession(connectionID: connectionID, protocol: protocolString, lineSettings: lineSettings)
        let accessory = session.accessory
        SessionTerminal.note("session \(session.id) with \(accessory.name) at \(accessory.deviceNode) for \(protocolString) (\(lineSettings ?? accessory.lineSettings)); EOF (Ctrl-D) ends it")
        try await SessionTerminal(client: client, session: session.id, output: session.output, name: "session \(session.id)",
                                  waitsFor: "its accessory to return").run()
    }
}
