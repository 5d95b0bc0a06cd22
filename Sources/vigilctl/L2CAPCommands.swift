import ArgumentParser
import FoundationEssentials
import Glibc
import VigilKit

/// `vigilctl ble l2cap`: a terminal onto an L2CAP channel, as `accessory open`
/// is onto an accessory: stdin to the channel (each chunk's write awaited, so
/// a fast producer is held back at the channel's pace), the channel's bytes to
/// stdout raw. Ends at EOF on stdin once every write is done (exit 0), or when
/// the channel closes (the reason on stderr, exit 1).
struct BleL2CAP: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "l2cap",
        abstract: "A terminal onto an L2CAP channel: to a peripheral's PSM (open) or from a central (listen).",
        subcommands: [BleL2CAPOpen.self, BleL2CAPListen.self, BleL2CAPList.self]
    )
}

struct L2CAPChannelOptions: ParsableArguments {
    @Option(help: "Security the link must have: low (default), medium, high, fips.")
    var security: String?

    @Option(name: .customLong("mtu"), help: "The largest SDU this side accepts (23-65535; default 2048).")
    var receiveMTU: Int?
}

struct BleL2CAPOpen: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "open",
        abstract: "Open a channel to a PSM on a peripheral (connecting first) and attach stdin and stdout to it."
    )

    @OptionGroup var options: GlobalOptions
    @OptionGroup var channelOptions: L2CAPChannelOptions
    @OptionGroup var link: LinkOptions

    @Argument(help: "The peripheral's address, e.g. AA:BB:CC:DD:EE:FF.")
    var address: String

    @Argument(help: "The PSM: 1-255 (128-255 dynamic), decimal or 0x hex.", transform: parsePSM)
    var psm: Int

    func run() async throws {
        let client = try await options.connect()
        try await requireBluetooth(client)
        // Always asked for: a channel needs this client's own connect request.
        let events = client.bluetoothEvents()
        try await client.connectPeripheral(address)
        guard await waitForConnection(client, events: events, address: address, seconds: link.seconds) else {
            throw ProtocolError(.notConnected, "\(address) did not connect within \(formatSeconds(link.seconds)) (is it in range?)")
        }
        let channel = try await client.openL2CAPChannel(
            peripheral: address, psm: psm, security: channelOptions.security, receiveMTU: channelOptions.receiveMTU)
        l2capNote("channel to \(channel.info.peer) PSM \(channel.info.psm) open (session \(channel.info.session), MTU send \(channel.info.sendMTU) receive \(channel.info.receiveMTU)); EOF (Ctrl-D) closes it")
        try await l2capTerminal(client, channel)
    }
}

struct BleL2CAPListen: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "listen",
        abstract: "Publish a PSM, wait for a central to open a channel to it, and attach stdin and stdout to it.",
        discussion: """
            Prints the PSM on stderr. Advertise it yourself (e.g. `vigilctl ble serve` with the PSM in \
            a characteristic) or with --advertise NAME. Serves one channel, then exits.
            """
    )

    @OptionGroup var options: GlobalOptions
    @OptionGroup var channelOptions: L2CAPChannelOptions

    @Option(help: "The PSM to listen on (default: a free dynamic one).", transform: parsePSM)
    var psm: Int?

    func run() async throws {
        let client = try await options.connect()
        try await requireBluetooth(client)
        let incoming = client.incomingL2CAPChannels()
        let published = try await client.publishL2CAPChannel(
            psm: psm, security: channelOptions.security, receiveMTU: channelOptions.receiveMTU)
        if options.json { StandardStreams.writeOut(Array("{\"psm\":\(published)}\n".utf8)) }
        l2capNote("listening on PSM \(published) (0x\(String(published, radix: 16)))")
        var iterator = incoming.makeAsyncIterator()
        guard let channel = await iterator.next() else {
            l2capFail("the connection to vigild closed before a central opened a channel")
        }
        l2capNote("channel from \(channel.info.peer) (session \(channel.info.session), MTU send \(channel.info.sendMTU) receive \(channel.info.receiveMTU)); EOF (Ctrl-D) closes it")
        try await l2capTerminal(client, channel)
    }
}

private func parsePSM(_ text: String) throws -> Int {
    let value = text.lowercased().hasPrefix("0x") ? Int(text.dropFirst(2), radix: 16) : Int(text)
    guard let value, (1...255).contains(value) else {
        throw ValidationError("'\(text)' is not an LE PSM (1-255, decimal or 0x hex)")
    }
    return value
}

/// stdin to the channel, the channel to stdout, until EOF or the channel's end.
private func l2capTerminal(_ client: ControlClient, _ channel: ControlL2CAPChannel) async throws {
    try await SessionTerminal(client: client, session: channel.info.session, output: channel.output, name: "channel",
                              waitsFor: "its link").run()
}

private func l2capNote(_ message: String) {
    SessionTerminal.note(message)
}

private func l2capFail(_ message: String) -> Never {
    SessionTerminal.fail(message)
}

struct BleL2CAPList: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list", abstract: "List the PSMs vigild listens on and the channels open or waiting to reopen, with their holders.")

    @OptionGroup var options: GlobalOptions

    func run() async throws {
        let list = try await options.connect().l2cap()
        if options.json { return try printJSON(list) }
        if list.published.isEmpty && list.channels.isEmpty { return print("no published PSMs and no channels") }
        for entry in list.published {
            print("PSM \(entry.psm)  published by \(entry.holder)  security \(entry.security ?? "low")  MTU \(entry.receiveMTU)  coalesce \(entry.coalesceMilliseconds) ms")
        }
        for channel in list.channels {
            print("session \(channel.session)  \(channel.peer) PSM \(channel.psm)  \(channel.state)\(channel.reopen ? " (reopens)" : "")  held by \(channel.holder)")
        }
    }
}
