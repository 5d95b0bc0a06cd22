import ArgumentParser
import VigilKit

/// `vigilctl ble rfcomm ADDRESS CHANNEL|UUID`: a terminal onto an RFCOMM
/// channel (Bluetooth Classic serial), as `ble l2cap open` is onto an L2CAP
/// one: stdin to the channel, its bytes to stdout raw. With `--listen
/// CHANNEL|UUID`, onto the first channel a device opens to a serial port
/// service it publishes. Ends at EOF on stdin
/// once every write is done (exit 0), or when the channel closes (exit 1).
struct BleRFCOMM: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rfcomm",
        abstract: "Open an RFCOMM (Bluetooth Classic serial) channel and attach stdin and stdout to it.",
        discussion: """
            The device must be known to BlueZ (paired, or discovered). Give a channel (1-30) or a service UUID \
            (0x1101: Serial Port), whose channel vigild finds through SDP. With --listen, publish a serial port \
            service instead (TARGET only: its channel, or a UUID and bluetoothd picks the channel), \
            wait for a device to connect, and attach stdin and stdout to its channel.
            """
    )

    @OptionGroup var options: GlobalOptions

    @Option(help: "Security the link must have: low (default), medium, high, fips.")
    var security: String?

    @Flag(help: "Publish a serial port service (TARGET only: its channel or UUID) and serve the first device that connects.")
    var listen = false

    @Option(help: "With --listen: the service name in its SDP record.")
    var name: String?

    @Argument(help: "ADDRESS TARGET: the device's address (e.g. 00:AA:01:00:00:23, not with --listen) and the server channel (1-30) or a service UUID (0x1101, or 128-bit).")
    var words: [String]

    var address: String { words.first ?? "" }
    var target: String { words.last ?? "" }

    func validate() throws {
        guard words.count == (listen ? 1 : 2) else {
            throw ValidationError(listen ? "with --listen give only the channel or the UUID" : "give the device's address and a channel or UUID")
        }
    }

    func run() async throws {
        let client = try await options.connect()
        let number = Int(target)
        if listen {
            let incoming = client.incomingRFCOMMChannels()
            let published = try await client.publishRFCOMMService(
                uuid: number == nil ? target : nil, channel: number, name: name, requireAuthentication: security.map { $0 != "low" })
            SessionTerminal.note("serial service \(published.uuid) published\(published.channel.map { " on channel \($0)" } ?? ""); waiting for a device")
            var iterator = incoming.makeAsyncIterator()
            guard let channel = await iterator.next() else {
                SessionTerminal.fail("the connection to vigild closed before a device connected")
            }
            SessionTerminal.note("channel from \(channel.info.peer) (session \(channel.info.session)); EOF (Ctrl-D) closes it")
            return try await SessionTerminal(client: client, session: channel.info.session, output: channel.output, name: "channel",
                                             waitsFor: "its device").run()
        }
        let channel = try await client.openRFCOMMChannel(
            device: address, channel: number, uuid: number == nil ? target : nil, security: security)
        SessionTerminal.note("RFCOMM channel \(channel.info.channel) on \(channel.info.peer) open (session \(channel.info.session)); EOF (Ctrl-D) closes it")
        try await SessionTerminal(client: client, session: channel.info.session, output: channel.output, name: "channel",
                                  waitsFor: "its device").run()
    }
}
