import ArgumentParser
import FoundationEssentials
import Glibc
import VigilKit

/// `vigilctl ble serve FILE`: the daemon's Bluetooth LE peripheral role, by
/// hand. Publishes the file's services (and advertises), answers the remote
/// centrals' requests the daemon forwards to this connection, prints what they
/// do, and feeds one characteristic from stdin. The services and the
/// advertisement end when vigilctl exits (the connection closes).
struct BleServe: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Publish GATT services from a file and serve them until Ctrl-C.",
        discussion: """
            FILE is JSON: {"services": [...], "advertisement": {...}, "stdin": "SERVICE/CHAR"}; services and \
            advertisement have the keys of the protocol's GATTServiceDefinition and AdvertisementData (values in \
            hex). Characteristics with a "value" are answered by the daemon. The others hold the last value \
            written to them, or read from stdin: reads get it, writes set it and are printed, one line each, \
            and so are subscriptions. With --stdin (or "stdin" in the file), each line of stdin is a value in hex \
            for that characteristic, sent to its subscribers. At the end of stdin vigilctl keeps serving until \
            Ctrl-C (--exit-on-eof: it stops). With --json, each line is a JSON object {event, service, \
            characteristic, value, ...}. See docs/bluetooth.md.
            """
    )

    @OptionGroup var options: GlobalOptions

    @Argument(help: "The services to publish (JSON).")
    var file: String

    @Flag(help: "Advertise: the file's advertisement, or (without one) the UUIDs of its primary services. A file with an advertisement is always advertised.")
    var advertise = false

    @Option(name: .customLong("stdin"), help: "Feed this characteristic from stdin, one hex value per line (CHAR or SERVICE/CHAR; overrides the file's \"stdin\").")
    var stdinCharacteristic: String?

    @Flag(help: "Stop at the end of stdin instead of serving on until Ctrl-C.")
    var exitOnEof = false

    @Option(help: "Publish and advertise on this adapter (hci1, or its address; default: the daemon's default adapter).")
    var adapter: String?

    func run() async throws {
        let description = try Self.load(file)
        let fed = try (stdinCharacteristic ?? description.stdin).map { name in
            do { return try description.characteristic(named: name) } catch { throw ValidationError("\(file): \(error)") }
        }
        let client = try await options.connect()
        let events = client.peripheralEvents()
        for service in description.services { try await client.addService(service, adapter: adapter) }
        let advertisement = advertise || description.advertisement != nil ? description.advertisementOrDefault : nil
        if let advertisement { try await client.startAdvertising(advertisement, adapter: adapter) }
        serveNote(Self.summary(description, advertisement: advertisement, fed: fed))

        let server = GATTServer(client: client, output: ServeOutput(json: options.json), fed: fed.map { ValueKey($0.service, $0.characteristic) })
        // stdin is read apart (a blocked read cannot be cancelled); at its end
        // with --exit-on-eof, closing the connection ends the event loop.
        if fed != nil {
            let exitOnEof = self.exitOnEof
            Task {
                await server.readStandardInput()
                guard exitOnEof else { return serveNote("end of stdin; serving until Ctrl-C") }
                await server.close()
            }
        }
        for await event in events { await server.handle(event) }
        guard await server.isClosed else { throw ProtocolError(.disconnected, "vigild closed the connection") }
    }

    /// Reads and checks FILE; its problems are usage errors.
    static func load(_ file: String) throws -> PeripheralDescription {
        let bytes: [UInt8]
        do {
            bytes = try Files.read(file)
        } catch {
            throw ValidationError("cannot read \(file): \(error)")
        }
        do {
            return try PeripheralDescription(json: Data(bytes))
        } catch {
            throw ValidationError("\(file): \(error)")
        }
    }

    static func summary(_ description: PeripheralDescription, advertisement: AdvertisementData?, fed: (service: String, characteristic: String)?) -> String {
        let services = description.services.map { "\(GATTNames.label($0.uuid, GATTNames.services)) (\($0.characteristics.count))" }
        var text = "serving " + services.joined(separator: ", ")
        if let advertisement {
            let name = advertisement.localName.map { "\"\($0)\" " } ?? ""
            text += "; advertising \(name)\((advertisement.serviceUUIDs ?? []).map(GATTUUID.short).joined(separator: ","))"
        }
        if let fed { text += "; stdin feeds \(GATTUUID.short(fed.service))/\(GATTUUID.short(fed.characteristic))" }
        return text + "; Ctrl-C ends"
    }
}

/// A characteristic, by its full UUIDs (events name them so; the file may not).
struct ValueKey: Hashable, Sendable {
    var service: String
    var characteristic: String

    init(_ service: String, _ characteristic: String) {
        self.service = GATTUUID.canonical(service) ?? service.lowercased()
        self.characteristic = GATTUUID.canonical(characteristic) ?? characteristic.lowercased()
    }
}

/// The dynamic characteristics' values and the requests on them.
actor GATTServer {
    let client: ControlClient
    let output: ServeOutput
    /// The characteristic stdin feeds.
    let fed: ValueKey?
    private var values: [ValueKey: [UInt8]] = [:]
    private var subscribed: Set<ValueKey> = []
    /// The fed value could not be sent (queue full): send the latest again on `readyToUpdate`.
    private var pendingUpdate = false

    /// vigilctl ended the connection itself.
    private(set) var isClosed = false

    func close() {
        isClosed = true
        client.close()
    }

    init(client: ControlClient, output: ServeOutput, fed: ValueKey?) {
        self.client = client
        self.output = output
        self.fed = fed
    }

    func handle(_ event: PeripheralManagerEvent) async {
        switch event {
        case let .readRequest(request):
            let value = values[ValueKey(request.service, request.characteristic)] ?? []
            guard request.offset <= value.count else {
                output.emit("read", request, note: "past the value's \(value.count) byte(s): invalidOffset")
                return await answer(request, error: .invalidOffset)
            }
            let part = Array(value[request.offset...])
            output.emit("read", request, value: part)
            await answer(request, value: part)
        case let .writeRequest(request, value):
            let key = ValueKey(request.service, request.characteristic)
            let old = values[key] ?? []
            guard request.offset <= old.count else {
                output.emit("write", request, value: value, note: "past the value's \(old.count) byte(s): invalidOffset")
                if request.needsResponse { await answer(request, error: .invalidOffset) }
                return
            }
            values[key] = request.offset == 0 ? value : Array(old.prefix(request.offset)) + value
            output.emit("write", request, value: value)
            if request.needsResponse { await answer(request) }
        case let .subscribed(service, characteristic):
            let key = ValueKey(service, characteristic)
            subscribed.insert(key)
            output.emit("subscribed", key)
            // A new subscriber of the fed characteristic gets its current value at once.
            if key == fed, let value = values[key] { await update(value) }
        case let .unsubscribed(service, characteristic):
            let key = ValueKey(service, characteristic)
            subscribed.remove(key)
            output.emit("unsubscribed", key)
        case .readyToUpdate:
            guard pendingUpdate, let fed, let value = values[fed] else { return }
            pendingUpdate = false
            await update(value)
        case let .stateChanged(state):
            output.emit(state: state)
        case .willRestoreState:
            break
        }
    }

    /// Each line a hex value for the fed characteristic, until the end of stdin.
    func readStandardInput() async {
        var pending: [UInt8] = []
        while let chunk = await StandardStreams.readIn() {
            pending += chunk
            while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                let line = String(decoding: pending[..<newline], as: UTF8.self)
                pending.removeSubrange(...newline)
                await take(line)
            }
        }
        if !pending.isEmpty { await take(String(decoding: pending, as: UTF8.self)) }
    }

    private func take(_ line: String) async {
        let text = line.trimmingWhitespace()
        guard !text.isEmpty, !text.hasPrefix("#"), let fed else { return }
        guard let value = GATTHex.bytes(text) else { return serveNote("stdin: '\(text)' is not hex (two digits per byte); skipped") }
        values[fed] = value
        await update(value)
    }

    /// Sends the fed characteristic's value to its subscribers.
    private func update(_ value: [UInt8]) async {
        guard let fed else { return }
        do {
            let reply = try await client.updateValue(value, service: fed.service, characteristic: fed.characteristic)
            pendingUpdate = !reply.sent
            output.emit(update: fed, value: value, reply: reply)
        } catch {
            serveNote("updating \(GATTUUID.short(fed.characteristic)): \(error)")
        }
    }

    private func answer(_ request: ATTRequest, value: [UInt8] = [], error: ATTError? = nil) async {
        do {
            try await client.respond(to: request, value: value, error: error)
        } catch {
            serveNote("answering the \(GATTUUID.short(request.characteristic)) request: \(error)")
        }
    }
}

/// `vigilctl ble serve`'s lines: for people, or (with `--json`) one object each.
struct ServeOutput: Sendable {
    let json: Bool

    struct Record: Encodable {
        var event: String
        var service: String?
        var characteristic: String?
        /// Hex: what a read got, a write brought, an update sent.
        var value: String?
        var offset: Int?
        var central: String?
        var withResponse: Bool?
        var sent: Bool?
        var subscribed: Bool?
        var state: String?
        var note: String?
        var time: Double
    }

    func emit(_ event: String, _ request: ATTRequest, value: [UInt8]? = nil, note: String? = nil) {
        let now = Date().timeIntervalSince1970
        let record = Record(
            event: event, service: request.service, characteristic: request.characteristic, value: value.map(GATTHex.string),
            offset: request.offset, central: request.central, withResponse: event == "write" ? request.needsResponse : nil, note: note, time: now)
        var text = "\(Self.pad(event))\(Self.label(request.service, request.characteristic))"
        if let value { text += "  \(value.isEmpty ? "(empty)" : GATTHex.string(value))" }
        var details: [String] = []
        if request.offset != 0 { details.append("offset \(request.offset)") }
        if event == "write", !request.needsResponse { details.append("without response") }
        if let central = request.central { details.append("from \(central)") }
        if let note { details.append(note) }
        if !details.isEmpty { text += "  (" + details.joined(separator: ", ") + ")" }
        line(record, text)
    }

    func emit(_ event: String, _ key: ValueKey) {
        let record = Record(event: event, service: key.service, characteristic: key.characteristic, time: Date().timeIntervalSince1970)
        line(record, Self.pad(event) + Self.label(key.service, key.characteristic))
    }

    func emit(update key: ValueKey, value: [UInt8], reply: ValueUpdated) {
        let record = Record(
            event: "update", service: key.service, characteristic: key.characteristic, value: GATTHex.string(value),
            sent: reply.sent, subscribed: reply.subscribed, time: Date().timeIntervalSince1970)
        let outcome = !reply.subscribed ? "no subscriber" : reply.sent ? "sent" : "queue full: sent again when there is room"
        line(record, "\(Self.pad("update"))\(Self.label(key.service, key.characteristic))  \(GATTHex.string(value))  (\(outcome))")
    }

    func emit(state: BluetoothState) {
        line(Record(event: "state", state: state.rawValue, time: Date().timeIntervalSince1970), Self.pad("state") + state.words)
    }

    private func line(_ record: Record, _ text: String) {
        emitLine(json ? (try? compactJSON(record)) ?? "" : "\(formatTime(record.time))  \(text)")
    }

    private static func pad(_ event: String) -> String { String(event.prefix(14)).padding(to: 14) }

    /// `180d/2a37 Heart Rate Measurement`.
    static func label(_ service: String, _ characteristic: String) -> String {
        "\(GATTUUID.short(service))/\(GATTNames.label(characteristic, GATTNames.characteristics))"
    }
}

func serveNote(_ message: String) {
    writeStandardError("vigilctl: \(message)\n")
}
