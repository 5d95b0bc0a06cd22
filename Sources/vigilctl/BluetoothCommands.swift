import ArgumentParser
import FoundationEssentials
import Glibc
import VigilKit

/// `vigilctl ble`: the daemon's Bluetooth LE central, by hand. The control
/// connection gets the same answers as an app, and its discoveries, connects
/// and notifications pushed to it instead of queued; its scan and its
/// subscriptions end when vigilctl exits.
struct Ble: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ble",
        abstract: "Bluetooth LE: the adapter, peripherals, GATT reads, writes and notifications; serving GATT services.",
        subcommands: [
            BleState.self, BleDevices.self, BleScan.self, BleConnect.self, BleDisconnect.self,
            BleGATT.self, BleRead.self, BleWrite.self, BleNotify.self, BleServe.self, BleL2CAP.self, BleRFCOMM.self,
            BlePair.self, BleUnpair.self, BleTrust.self, BleMonitor.self,
        ]
    )
}

struct BleState: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "state", abstract: "Show the adapter's state.")

    @OptionGroup var options: GlobalOptions

    func run() async throws {
        let reply = try await options.connect().bluetoothState()
        if options.json { return try printJSON(reply) }
        // The reason only when there is one to give: "powered on (hci0)", "powered off (hci0): adapter hci0 is powered off (...)".
        let reason = reply.state == .poweredOn ? nil : reply.detail
        print(reply.state.words + (reply.adapter.map { " (\($0))" } ?? "") + (reason.map { ": \($0)" } ?? ""))
    }
}

struct BleDevices: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "devices", abstract: "List the peripherals the daemon knows: seen by a scan, or connected.")

    @OptionGroup var options: GlobalOptions

    func run() async throws {
        let peripherals = try await options.connect().peripherals()
        if options.json { return try printJSON(peripherals) }
        print(peripherals.isEmpty ? "no peripherals (scan with `vigilctl ble scan`)" : PeripheralTable(peripherals).text)
    }
}

struct BleScan: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "scan",
        abstract: "Scan and print peripherals as they are discovered, one line each, until the timeout or Ctrl-C.",
        discussion: "With --json, each line is a JSON object: the peripheral's members."
    )

    @OptionGroup var options: GlobalOptions

    @Option(name: .customLong("service"), help: "Only peripherals advertising this service (repeatable; e.g. 180d).")
    var services: [String] = []

    @Option(help: "Stop after this many seconds (default: until interrupted).")
    var timeout: Double?

    @Flag(help: "Report every advertisement (RSSI updates), not just the first of each peripheral.")
    var duplicates = false

    @Option(help: "Scan with this adapter (hci1, or its address; default: the daemon's default adapter).")
    var adapter: String?

    func run() async throws {
        let client = try await options.connect()
        if adapter == nil { try await requireBluetooth(client) }
        let events = client.bluetoothEvents()
        try await client.startScan(services: services.isEmpty ? nil : services, allowDuplicates: duplicates, adapter: adapter)
        let json = options.json
        let ended: Void? = await race(timeout) {
            for await event in events {
                guard case let .discovered(peripheral) = event else { continue }
                let line = DiscoveryLine(peripheral: peripheral)
                emitLine(json ? (try? line.json()) ?? "" : line.text)
            }
        }
        guard ended == nil else { throw ProtocolError(.disconnected, "vigild closed the connection") }
        try await client.stopScan()
    }
}

struct BleConnect: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "connect",
        abstract: "Ask for a connection, and wait for it.",
        discussion: """
            The request never times out in the daemon: a peripheral out of range is connected when it \
            comes back, until `vigilctl ble disconnect`. vigilctl waits --wait seconds for it, then says \
            whether it is connected or still pending.
            """
    )

    @OptionGroup var options: GlobalOptions

    @Argument(help: "The peripheral's address, e.g. AA:BB:CC:DD:EE:FF.")
    var address: String

    @Option(help: "Seconds to wait for the connection (0: do not wait).")
    var wait: Double = 10

    @Option(help: "Connect through this adapter (hci1, or its address; default: the daemon's default adapter).")
    var adapter: String?

    func run() async throws {
        let client = try await options.connect()
        let events = client.bluetoothEvents()
        try await client.connectPeripheral(address, adapter: adapter)
        let connected = wait > 0 ? await waitForConnection(client, events: events, address: address, seconds: wait) : false
        if options.json { return try printJSON(LinkRecord(peripheral: address, state: connected ? "connected" : "pending")) }
        if connected {
            print("connected to \(address)")
        } else {
            print("connect request for \(address) pending: the daemon connects when the peripheral is in range")
        }
    }
}

struct BleDisconnect: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "disconnect", abstract: "Cancel a connect request or drop the connection (kept up while an app uses it).")

    @OptionGroup var options: GlobalOptions

    @Argument(help: "The peripheral's address.")
    var address: String

    func run() async throws {
        try await options.connect().cancelPeripheralConnection(address)
        if options.json { return try printJSON(LinkRecord(peripheral: address, state: "cancelled")) }
        print("cancelled the connection to \(address)")
    }
}

struct BleGATT: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "gatt",
        abstract: "Print a peripheral's services, characteristics (with their properties) and descriptors.",
        discussion: "Connects first if the peripheral is not connected, and disconnects again afterwards."
    )

    @OptionGroup var options: GlobalOptions
    @OptionGroup var link: LinkOptions

    @Argument(help: "The peripheral's address.")
    var address: String

    func run() async throws {
        let client = try await options.connect()
        let services = try await withConnection(client, address, link) { try await client.discoverServices(address) }
        if options.json { return try printJSON(services) }
        print(GATTTree(services).text)
    }
}

struct BleRead: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "read",
        abstract: "Read a characteristic (or a descriptor) and print its value in hex.",
        discussion: "Connects first if the peripheral is not connected, and disconnects again afterwards."
    )

    @OptionGroup var options: GlobalOptions
    @OptionGroup var link: LinkOptions

    @Argument(help: "The peripheral's address.") var address: String
    @Argument(help: "The service's UUID, e.g. 180f.") var service: String
    @Argument(help: "The characteristic's UUID, e.g. 2a19.") var characteristic: String

    @Option(help: "Read this descriptor of the characteristic instead, e.g. 2901.")
    var descriptor: String?

    @Option(help: "Which characteristic of that UUID: 0 the first by handle, 1 the second (see `ble gatt`).")
    var instance = 0

    func run() async throws {
        let client = try await options.connect()
        let path = CharacteristicPath(peripheral: address, service: service, characteristic: characteristic, instance: instance)
        let value = try await withConnection(client, address, link) { try await client.readValue(path, descriptor: descriptor) }
        if options.json {
            return try printJSON(ValueRecord(
                peripheral: address, service: service, characteristic: characteristic, instance: instance == 0 ? nil : instance,
                descriptor: descriptor, value: Hex.string(value)))
        }
        print(Hex.string(value))
    }
}

struct BleWrite: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "write",
        abstract: "Write a value (hex) to a characteristic.",
        discussion: "Connects first if the peripheral is not connected, and disconnects again afterwards."
    )

    @OptionGroup var options: GlobalOptions
    @OptionGroup var link: LinkOptions

    @Argument(help: "The peripheral's address.") var address: String
    @Argument(help: "The service's UUID.") var service: String
    @Argument(help: "The characteristic's UUID.") var characteristic: String
    @Argument(help: "The value in hex, e.g. 0102 or \"01 02\".") var hex: String

    @Flag(help: "Write without response (returns once BlueZ took the value).")
    var withoutResponse = false

    @Option(help: "Write this descriptor of the characteristic instead, e.g. 2901 (always with response).")
    var descriptor: String?

    @Option(help: "Which characteristic of that UUID: 0 the first by handle, 1 the second (see `ble gatt`).")
    var instance = 0

    func validate() throws {
        guard Hex.bytes(hex) != nil else { throw ValidationError("'\(hex)' is not hex (two digits per byte)") }
        if descriptor != nil && withoutResponse { throw ValidationError("a descriptor is always written with response") }
    }

    func run() async throws {
        let client = try await options.connect()
        let path = CharacteristicPath(peripheral: address, service: service, characteristic: characteristic, instance: instance)
        let value = Hex.bytes(hex) ?? []
        try await withConnection(client, address, link) {
            try await client.writeValue(value, to: path, descriptor: descriptor, withResponse: !withoutResponse)
        }
        print("wrote \(value.count) byte(s) to \(GATTUUID.short(descriptor ?? characteristic))")
    }
}

struct BleNotify: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "notify",
        abstract: "Subscribe to a characteristic and print its values (hex) as they come, until the count, the timeout or Ctrl-C.",
        discussion: """
            Connects first if the peripheral is not connected, and disconnects again afterwards. With --json, \
            each line is a JSON object {peripheral, service, characteristic, value, time}.
            """
    )

    @OptionGroup var options: GlobalOptions
    @OptionGroup var link: LinkOptions

    @Argument(help: "The peripheral's address.") var address: String
    @Argument(help: "The service's UUID, e.g. 180d.") var service: String
    @Argument(help: "The characteristic's UUID, e.g. 2a37.") var characteristic: String

    @Flag(help: "Use BlueZ's AcquireNotify (a socket), StartNotify only if it fails (the daemon's default where the characteristic allows it).")
    var acquire = false

    @Flag(help: "Use BlueZ's StartNotify only: for a peripheral that notifies before its subscription is confirmed (AcquireNotify loses those values).")
    var startNotify = false

    func validate() throws {
        if acquire && startNotify { throw ValidationError("--acquire and --start-notify exclude each other") }
    }

    @Option(help: "Stop after this many values.")
    var count: Int?

    @Option(help: "Stop after this many seconds.")
    var timeout: Double?

    @Option(help: "Which characteristic of that UUID: 0 the first by handle, 1 the second (see `ble gatt`).")
    var instance = 0

    func run() async throws {
        let client = try await options.connect()
        let path = CharacteristicPath(peripheral: address, service: service, characteristic: characteristic, instance: instance)
        let (json, address, service, characteristic, count, instance) = (options.json, address, service, characteristic, count, instance)
        let lost = try await withConnection(client, address, link) {
            let events = client.bluetoothEvents()
            try await client.setNotifyValue(true, for: path, acquire: acquire ? true : startNotify ? false : nil)
            note("subscribed to \(GATTUUID.short(characteristic)) of \(address); Ctrl-C ends")
            let outcome = await race(timeout) { () -> Bool in
                var received = 0
                for await event in events {
                    switch event {
                    case let .valueUpdated(from, value)
                        where sameAddress(from.peripheral, address) && from.matches(service: service, characteristic: characteristic, instance: instance):
                        let now = Date().timeIntervalSince1970
                        let record = ValueRecord(
                            peripheral: address, service: service, characteristic: characteristic, instance: instance == 0 ? nil : instance,
                            value: Hex.string(value), time: now)
                        emitLine(json ? (try? compactJSON(record)) ?? "" : "\(formatTime(now))  \(Hex.string(value))")
                        received += 1
                        if let count, received >= count { return false }
                    case let .disconnected(peripheral, reason, willReconnect) where sameAddress(peripheral, address):
                        note("\(address) disconnected: \(reason)\(willReconnect ? " (the daemon reconnects it)" : "")")
                    case let .connected(peripheral) where sameAddress(peripheral, address):
                        note("\(address) connected again")
                    default:
                        continue
                    }
                }
                return true
            }
            let lost = outcome ?? false
            if !lost { try? await client.setNotifyValue(false, for: path) }
            return lost
        }
        if lost { throw ProtocolError(.disconnected, "vigild closed the connection") }
    }
}

/// How GATT commands get a connection when there is none.
struct LinkOptions: ParsableArguments {
    @Option(name: .customLong("wait"), help: "Seconds to wait for the connection when the peripheral is not connected.")
    var seconds: Double = 30

    @Option(help: "Connect through this adapter when not connected (hci1, or its address; default: the daemon's default).")
    var adapter: String?
}

// MARK: Helpers

/// Runs `body` with `address` connected: if it is not, connects, waits up to
/// `link.seconds`, and cancels the connection again afterwards.
@discardableResult
func withConnection<T>(
    _ client: ControlClient, _ address: String, _ link: LinkOptions, _ body: () async throws -> T
) async throws -> T {
    if link.adapter == nil { try await requireBluetooth(client) }
    let peripherals = try await client.peripherals()
    if peripherals.contains(where: {
        sameAddress($0.address, address) && $0.state == "connected" && (link.adapter == nil || $0.adapter == link.adapter)
    }) {
        return try await body()
    }
    let events = client.bluetoothEvents()
    try await client.connectPeripheral(address, adapter: link.adapter)
    guard await waitForConnection(client, events: events, address: address, seconds: link.seconds) else {
        try? await client.cancelPeripheralConnection(address)
        throw ProtocolError(.notConnected, "\(address) did not connect within \(formatSeconds(link.seconds)) (is it in range?)")
    }
    do {
        let result = try await body()
        try? await client.cancelPeripheralConnection(address)
        return result
    } catch {
        try? await client.cancelPeripheralConnection(address)
        throw error
    }
}

/// Fails at once, with the daemon's reason, when Bluetooth cannot be used
/// (no bus, no bluetoothd, no adapter, powered off) instead of waiting for
/// discoveries or a connection that cannot come. BlueZ just (re)appearing
/// (`starting`) is waited through, as the daemon does.
func requireBluetooth(_ client: ControlClient) async throws {
    let reply = try await client.bluetoothState()
    let usable =
        switch reply.condition {
        case .poweredOn?, .starting?: true
        case nil: reply.state == .poweredOn || reply.state == .resetting  // an older daemon
        default: false
        }
    guard usable else {
        throw ProtocolError(.unavailable, "Bluetooth is unavailable: \(reply.detail ?? reply.state.words)")
    }
}

/// Whether `address` connects within `seconds`: a `connected` push, or
/// (should the push not come, e.g. for a link that was already up) the
/// daemon's list saying so, asked once a second.
func waitForConnection(_ client: ControlClient, events: AsyncStream<CentralEvent>, address: String, seconds: Double) async -> Bool {
    await withTaskGroup(of: Bool.self) { group in
        group.addTask {
            for await event in events {
                if case let .connected(peripheral) = event, sameAddress(peripheral, address) { return true }
            }
            return false
        }
        group.addTask {
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(1))
                guard let list = try? await client.peripherals() else { continue }
                if list.contains(where: { sameAddress($0.address, address) && $0.state == "connected" }) { return true }
            }
            return false
        }
        group.addTask {
            try? await Task.sleep(for: .seconds(seconds))
            return false
        }
        let connected = await group.next() ?? false
        group.cancelAll()
        return connected
    }
}

/// Runs `body` until it returns or `timeout` seconds pass (nil: no limit).
/// Returns what `body` returned, or nil when the time ran out first.
func race<T: Sendable>(_ timeout: Double?, _ body: @escaping @Sendable () async -> T) async -> T? {
    await withTaskGroup(of: T?.self) { group in
        group.addTask { await body() }
        if let timeout {
            group.addTask {
                try? await Task.sleep(for: .seconds(timeout))
                return nil
            }
        }
        let first = await group.next() ?? nil
        group.cancelAll()
        return first
    }
}

func sameAddress(_ lhs: String, _ rhs: String) -> Bool {
    lhs.uppercased() == rhs.uppercased()
}

/// One line on stdout, unbuffered: the output is often a pipe to a script waiting for it.
func emitLine(_ line: String) {
    StandardStreams.writeOut(Array((line + "\n").utf8))
}

private func note(_ message: String) {
    writeStandardError("vigilctl: \(message)\n")
}
