import ArgumentParser
import VigilKit

/// `vigilctl ble rfcomm ADDRESS CHANNEL|UUID`: a terminal onto an RFCOMM
/// channel (Bluetooth Classic serial), as `ble l2cap open` is onto an L2CAP
/// one: stdin to the channel, its bytes to stdout raw. Ends at EOF on stdin
/// once every write is done (exit 0), or when the channel closes (exit 1).
struct BleRFCOMM: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rfcomm",
        abstract: "Open an RFCOMM (Bluetooth Classic serial) channel and attach stdin and stdout to it.",
        discussion: "The device must be known to BlueZ (paired, or discovered). Give a channel (1-30) or a service UUID (0x1101: Serial Port), whose channel vigild finds through SDP."
    )

    @OptionGroup var options: GlobalOptions

    @Option(help: "Security the link must have: low (default), medium, high, fips.")
    var security: String?

    @Argument(help: "The device's address, e.g. 00:AA:01:00:00:23.")
    var address: String

    @Argument(help: "The server channel (1-30) or a service UUID (0x1101, or 128-bit).")
    var target: String

    func run() async throws {
        let client = try await options.connect()
        let number = Int(target)
        let channel = try await client.openRFCOMMChannel(
            device: address, channel: number, uuid: number == nil ? target : nil, security: security)
        SessionTerminal.note("RFCOMM channel \(channel.info.channel) on \(channel.info.peer) open (session \(channel.info.session)); EOF (Ctrl-D) closes it")
        try await SessionTerminal(client: client, session: channel.info.session, output: channel.output, name: "channel",
                                  waitsFor: "its device").run()
    }
}
