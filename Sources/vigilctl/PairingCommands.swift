import ArgumentParser
import FoundationEssentials
import Glibc
import VigilKit

/// `vigilctl ble pair / unpair / trust`: bonds by hand. vigild is BlueZ's
/// pairing agent; the prompts of a pairing vigilctl asked for come to it and
/// are asked on the terminal (or answered from `--passkey`, `--pin`, `--yes`).
struct BlePair: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pair",
        abstract: "Pair with (bond to) a peripheral, answering its prompts on the terminal.",
        discussion: """
            A passkey to type (the peripheral shows it) is read from the terminal, or taken from \
            --passkey; a number to compare is asked as yes/no, or accepted with --yes; a passkey to \
            type on the peripheral is printed. A peripheral BlueZ does not know yet is connected \
            first (waiting up to --wait seconds). Exit status 0 once paired; 1 with BlueZ's reason \
            (AuthenticationFailed, AuthenticationCanceled, a prompt not answered in time).
            """
    )

    @OptionGroup var options: GlobalOptions

    @Argument(help: "The peripheral's address.")
    var address: String

    @Option(help: "The passkey to answer a passkey prompt with (0-999999), instead of asking.")
    var passkey: Int?

    @Option(help: "The PIN to answer a PIN prompt with, instead of asking.")
    var pin: String?

    @Flag(name: .customLong("yes"), help: "Accept confirmation and authorization prompts without asking.")
    var acceptAll = false

    @Option(help: "Seconds to wait for an unknown peripheral to connect before pairing.")
    var wait: Double = 30

    @Flag(help: "Also mark the peripheral trusted once paired.")
    var trust = false

    func run() async throws {
        let client = try await options.connect()
        try await requireBluetooth(client)
        let prompts = client.bluetoothEvents()
        let target = address
        let answers = Task { [passkey, pin, acceptAll] in
            for await event in prompts {
                guard case let .pairingRequest(prompt) = event, sameAddress(prompt.peripheral, target) else { continue }
                await answer(prompt, client: client, passkey: passkey, pin: pin, acceptAll: acceptAll)
            }
        }
        defer { answers.cancel() }
        var state: PairingState
        do {
            state = try await client.pair(address)
        } catch let error as ProtocolError where error.code == .notFound {
            // BlueZ has not seen it: connect (which scans until it is found), then pair.
            let events = client.bluetoothEvents()
            try await client.connectPeripheral(address)
            guard await waitForConnection(client, events: events, address: address, seconds: wait) else {
                try? await client.cancelPeripheralConnection(address)
                throw ProtocolError(.notConnected, "\(address) was not found within \(formatSeconds(wait)) (is it in range?)")
            }
            state = try await client.pair(address)
        }
        if trust { state = try await client.setTrusted(true, peripheral: address) }
        if options.json { return try printJSON(state) }
        print("paired with \(state.peripheral) (bonded: \(state.bonded ? "yes" : "no"), trusted: \(state.trusted ? "yes" : "no"))")
    }
}

/// Answers one prompt from the options, or by asking on the terminal.
private func answer(_ prompt: PairingPrompt, client: ControlClient, passkey: Int?, pin: String?, acceptAll: Bool) async {
    let device = prompt.peripheral
    let deadline = prompt.timeout.map { " (within \(formatSeconds($0)))" } ?? ""
    do {
        switch prompt.kind {
        case .passkey:
            let value = passkey ?? ask("Passkey shown on \(device)\(deadline): ").flatMap { Int($0) }
            try await client.respond(to: prompt, accept: value != nil, passkey: value)
        case .pin:
            let value = pin ?? ask("PIN for \(device)\(deadline): ")
            try await client.respond(to: prompt, accept: value?.isEmpty == false, pin: value)
        case .confirm:
            let shown = prompt.passkeyText ?? "?"
            let yes = acceptAll || ask("Does \(device) show \(shown)? [y/N]\(deadline) ").map(isYes) ?? false
            try await client.respond(to: prompt, accept: yes)
        case .authorize, .authorizeService:
            let what = prompt.service.map { "service \($0) of \(device)" } ?? "pairing with \(device) without a passkey"
            let yes = acceptAll || ask("Allow \(what)? [y/N]\(deadline) ").map(isYes) ?? false
            try await client.respond(to: prompt, accept: yes)
        case .displayPasskey:
            writeStandardError("Type \(prompt.passkeyText ?? "?") on \(device)\n")
        case .displayPin:
            writeStandardError("Type PIN \(prompt.pin ?? "?") on \(device)\n")
        }
    } catch {
        writeStandardError("vigilctl: answering the \(prompt.kind.rawValue) prompt failed: \(error)\n")
    }
}

private func ask(_ question: String) -> String? {
    writeStandardError(question)
    return readLine(strippingNewline: true)?.trimmingWhitespace()
}

private func isYes(_ text: String) -> Bool {
    ["y", "yes"].contains(text.lowercased())
}

struct BleUnpair: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "unpair",
        abstract: "Forget a peripheral: remove its bond (keys) and BlueZ's record of it.",
        aliases: ["forget"]
    )

    @OptionGroup var options: GlobalOptions

    @Argument(help: "The peripheral's address.")
    var address: String

    func run() async throws {
        try await options.connect().forget(address)
        if options.json { return try printJSON(LinkRecord(peripheral: address, state: "forgotten")) }
        print("forgot \(address)")
    }
}

struct BleTrust: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "trust", abstract: "Mark a peripheral trusted (or, with --off, not trusted).")

    @OptionGroup var options: GlobalOptions

    @Argument(help: "The peripheral's address.")
    var address: String

    @Flag(help: "Remove the trust instead.")
    var off = false

    func run() async throws {
        let state = try await options.connect().setTrusted(!off, peripheral: address)
        if options.json { return try printJSON(state) }
        print("\(state.peripheral) is \(state.trusted ? "trusted" : "not trusted")")
    }
}
