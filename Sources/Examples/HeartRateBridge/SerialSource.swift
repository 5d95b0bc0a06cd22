import VigilKit

/// `--serial-protocol PROTO`: measurements from the first serial accessory
/// that speaks PROTO, one line each (`SerialHeartRateLine`), instead of a BLE
/// monitor. The session is opened with `reopen`, so it survives unplugging;
/// vigild reads while the app is frozen and wakes it per burst of lines.
actor SerialSource {
    let app: Application
    let protocolString: String
    let output: Output
    let republisher: Republisher?
    /// `--mqtt`: each measurement line also goes to the broker through vigild.
    let export: MeasurementExport?
    /// The accessory followed (its identity), while it has a session.
    private var held: String?
    /// The unfinished line of each session (ours, or an earlier process's redelivered one).
    private var splitters: [Int: LineSplitter] = [:]
    private var sources: [Int: String] = [:]
    private var energy = EnergyOffset()

    init(app: Application, protocolString: String, output: Output, republisher: Republisher?, export: MeasurementExport? = nil) {
        self.export = export
        self.app = app
        self.protocolString = protocolString
        self.output = output
        self.republisher = republisher
    }

    /// Control point 0x01: Energy Expended counts from here.
    func resetEnergy() {
        energy.reset()
    }

    /// Opens a session with the first connected accessory speaking the protocol, if none is held.
    func rescan(_ why: String) async {
        // Not suspended half-way (another event's handler may say it has finished meanwhile).
        let task = await app.beginBackgroundTask(name: "serial-rescan")
        do {
            for accessory in try await app.accessoryManager.connectedAccessories() where held == nil {
                await attach(accessory, why)
            }
        } catch {
            fail("list accessories", "\(error)", source: nil)
        }
        await app.endBackgroundTask(task)
    }

    func attach(_ accessory: AccessoryInfo, _ why: String) async {
        guard held == nil, accessory.protocolStrings.contains(protocolString) else { return }
        let task = await app.beginBackgroundTask(name: "serial-open")
        await open(accessory, why)
        await app.endBackgroundTask(task)
    }

    private func open(_ accessory: AccessoryInfo, _ why: String) async {
        guard held == nil else { return }
        let identity = "\(accessory.vendorID):\(accessory.productID):\(Self.source(of: accessory))"
        held = identity  // claimed before the first await
        let session: AccessorySession
        do {
            session = try await app.accessoryManager.openSession(to: accessory, protocol: protocolString, reopen: true)
        } catch {
            held = nil
            if "\(error)".contains("held by app \(app.id) ") {
                // The session of an earlier process carries on: its data comes in Application.events.
                say("\(Self.source(of: accessory)): the session of an earlier process carries on (\(error))")
                held = identity
            } else {
                fail("open a session for \(protocolString)", "\(error)", source: Self.source(of: accessory))
            }
            return
        }
        let source = Self.source(of: accessory)
        sources[session.id] = source
        output.write(OutputLine(.accessory(event: "opened", source: source, session: session.id, detail: why)))
        say("session \(session.id) open with \(source) on \(accessory.deviceNode) for \(protocolString) (\(why))")
        Task { await self.follow(session) }
    }

    /// The session's items in order; each acknowledged when the loop asks for the next.
    private func follow(_ session: AccessorySession) async {
        for await event in session.incoming {
            switch event {
            case let .data(bytes):
                await data(bytes, session: session.id)
            case .loss:
                say("session \(session.id): the device reported lost bytes")
            case let .interrupted(reason):
                await broke(session: session.id, event: "interrupted", reason)
            case let .reopened(accessory):
                sources[session.id] = Self.source(of: accessory)
                output.write(OutputLine(.accessory(
                    event: "reopened", source: Self.source(of: accessory), session: session.id, detail: accessory.deviceNode)))
            case .lines:
                break  // the bridge watches no modem lines
            case let .closed(reason):
                await broke(session: session.id, event: "closed", reason)
            }
            await finishIfBackground(app)
        }
        held = nil
        splitters[session.id] = nil
        try? await Task.sleep(for: .seconds(1))
        await rescan("a session ended")
        await finishIfBackground(app)
    }

    /// A session of an earlier process ended for good: open one of our own.
    func earlierSessionEnded(_ session: Int) async {
        guard sources[session] == nil else { return }  // one of ours: `follow` sees it end
        held = nil
        await rescan("a session of an earlier process ended")
    }

    /// The byte stream broke off: an unfinished line can never be completed.
    func broke(session: Int, event: String, _ reason: String) async {
        let source = sources[session] ?? "serial:session \(session)"
        output.write(OutputLine(.accessory(event: event, source: source, session: session, detail: reason)))
        if let partial = splitters[session]?.reset() {
            fail("parse serial line", "the stream broke off inside a line", source: source, raw: partial)
        }
        if event == "closed" { splitters[session] = nil }
    }

    /// A chunk of the sensor's stream: each complete line becomes a
    /// measurement line and, with `--republish`, a notification.
    func data(_ bytes: [UInt8], session: Int) async {
        let source = sources[session] ?? "serial:session \(session)"
        var splitter = splitters[session] ?? LineSplitter()
        let pieces = splitter.feed(bytes)
        splitters[session] = splitter
        for piece in pieces {
            switch piece {
            case let .tooLong(start):
                fail("parse serial line", "line longer than \(LineSplitter.maxLineLength) bytes: dropped", source: source, raw: start)
            case let .line(line):
                switch SerialHeartRateLine(line) {
                case .blank:
                    continue
                case let .malformed(problem):
                    fail("parse serial line", problem, source: source, raw: line)
                case let .measurement(measurement):
                    let published = energy.apply(measurement)
                    let value = published.bytes
                    let measurementLine = OutputLine(.measurement(address: source, measurement: published, raw: value))
                    output.write(measurementLine)
                    await export?.send(measurementLine)
                    await republisher?.publish(value)
                }
            }
        }
    }

    private func fail(_ operation: String, _ message: String, source: String?, raw: [UInt8]? = nil) {
        say("cannot \(operation)\(source.map { " (\($0))" } ?? ""): \(message)")
        output.write(OutputLine(.error(operation: operation, message: message, address: source, raw: raw)))
    }

    /// `serial:` and the serial number (the device node without one).
    static func source(of accessory: AccessoryInfo) -> String {
        "serial:" + (accessory.serialNumber.isEmpty ? accessory.deviceNode : accessory.serialNumber)
    }
}
