import VigilKit

/// Carries out the planner's decisions against the daemon: one event at a
/// time, in the daemon's order (the caller awaits `handle` before taking the
/// next event, which acknowledges this one). Failures become `error` lines and
/// a retry a few seconds later, never a crash.
actor Bridge {
    let app: Application
    let central: CentralManager
    let output: Output
    /// `--republish`: each measurement's value goes out again on our own 0x2A37.
    let republisher: Republisher?
    /// `--mqtt`: each measurement line also goes to the broker through vigild.
    let export: MeasurementExport?
    private(set) var planner: BridgePlanner
    private var retryScheduled = false

    /// Seconds before a failed scan, connect or GATT set-up is tried again.
    static let retryDelay = 5.0

    init(
        app: Application, central: CentralManager, output: Output, options: BridgeOptions,
        republisher: Republisher? = nil, export: MeasurementExport? = nil
    ) {
        self.export = export
        self.app = app
        self.central = central
        self.output = output
        self.republisher = republisher
        self.planner = BridgePlanner(wantedAddress: options.address)
    }

    /// Starts (scan or connect) if nothing was restored and the adapter is on.
    func begin() async {
        await perform(planner.begin(state: central.state))
    }

    func handle(_ event: CentralEvent) async {
        if case .willRestoreState = event { planner.noteAdapterState(central.state) }
        await perform(planner.handle(event))
    }

    private func perform(_ actions: [BridgePlanner.Action]) async {
        for action in actions {
            switch action {
            case let .write(record):
                let line = OutputLine(record)
                output.write(line)
                await export?.send(line)
                if case let .measurement(_, _, raw) = record {
                    await republisher?.publish(raw)  // byte for byte as the monitor sent it
                }
            case let .scan(services):
                do {
                    try await central.scanForPeripherals(withServices: services)
                } catch {
                    fail("scan for \(services.map(GATTUUID.short))", error, address: nil)
                    planner.startFailed()
                    scheduleRetry()
                }
            case .stopScan:
                do { try await central.stopScan() } catch { fail("stop scanning", error, address: nil) }
            case let .connect(address):
                do {
                    try await central.connect(address)
                } catch {
                    fail("connect", error, address: address)
                    planner.startFailed()
                    scheduleRetry()
                }
            case let .setUp(address, discover, readLocation, subscribe):
                await setUp(address, discover: discover, readLocation: readLocation, subscribe: subscribe)
            }
        }
    }

    /// Discovers services (when not known), reads Body Sensor Location (once per
    /// process) and subscribes to Heart Rate Measurement, inside a background
    /// task so that the app is not suspended half-way.
    private func setUp(_ address: String, discover: Bool, readLocation: Bool, subscribe: Bool) async {
        let task = await app.beginBackgroundTask(name: "gatt-setup") {
            say("gatt-setup: background time is running out")
        }
        let peripheral = central.peripheral(address)
        var complete = true
        if discover {
            do {
                let services = try await peripheral.discoverServices()
                planner.servicesDiscovered(services)
                if !services.hasHeartRateService {
                    output.write(OutputLine(.error(
                        operation: "discover services",
                        message: "\(address) has no Heart Rate Service (0x180D); services: "
                            + services.map { GATTUUID.short($0.uuid) }.joined(separator: ", "),
                        address: address, raw: nil)))
                }
            } catch {
                fail("discover services", error, address: address)
                complete = false
            }
        }
        if readLocation {
            if let services = planner.services,
                services.characteristic(HeartRateService.bodySensorLocation, of: HeartRateService.service) == nil {
                say("\(address) has no Body Sensor Location characteristic (0x2A38): not read")
                planner.locationUnavailable()
            } else {
                do {
                    let value = try await peripheral.readValue(
                        service: HeartRateService.service, characteristic: HeartRateService.bodySensorLocation)
                    await perform(planner.locationValue(value, from: address))
                } catch {
                    fail("read body sensor location", error, address: address)
                    complete = false
                }
            }
        }
        if subscribe {
            do {
                try await peripheral.setNotifyValue(
                    true, service: HeartRateService.service, characteristic: HeartRateService.measurement)
                await perform(planner.subscriptionConfirmed(address))
            } catch {
                fail("subscribe to heart rate measurement", error, address: address)
                complete = false
            }
        }
        if !complete { scheduleRetry() }
        await app.endBackgroundTask(task)
    }

    /// Control point 0x01 written to our republished service: passed on to the
    /// monitor's own Heart Rate Control Point (0x2A39).
    func resetEnergyExpended() async throws {
        guard let target = planner.target, planner.connected else {
            throw BridgeError("no monitor connected to pass the energy reset on to")
        }
        try await central.peripheral(target).writeValue(
            [0x01], service: HeartRateService.service, characteristic: HeartRateService.controlPoint, withResponse: true)
    }

    private func fail(_ operation: String, _ error: any Error, address: String?) {
        say("cannot \(operation)\(address.map { " (\($0))" } ?? ""): \(error)")
        output.write(OutputLine(.error(operation: operation, message: "\(error)", address: address, raw: nil)))
    }

    /// One retry at a time; a frozen app simply retries when it runs again.
    private func scheduleRetry() {
        guard !retryScheduled else { return }
        retryScheduled = true
        Task {
            try? await Task.sleep(for: .seconds(Self.retryDelay))
            await self.retry()
        }
    }

    private func retry() async {
        retryScheduled = false
        await perform(planner.retry())
        await finishIfBackground(app)
    }
}

/// Tells vigild the app has handled what woke it, so that it is suspended at
/// once (once every event it was given is acknowledged) instead of running
/// out its wake budget. Nothing to do in the foreground.
func finishIfBackground(_ app: Application) async {
    guard app.state == .background else { return }
    await app.finishedProcessing()
}

struct BridgeError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
