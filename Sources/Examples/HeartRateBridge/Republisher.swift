import VigilKit

/// Carries out the `RepublishPlanner`'s decisions against the daemon's
/// peripheral role. Measurements come from the source (`publish`), one at a
/// time and in order; the peripheral manager's events from its own loop.
actor Republisher {
    let app: Application
    let manager: PeripheralManager
    let output: Output
    private(set) var planner: RepublishPlanner
    /// Resets Energy Expended at the source; set once the source exists.
    private var resetEnergy: (@Sendable () async throws -> Void)?
    private var retryScheduled = false

    init(app: Application, manager: PeripheralManager, output: Output, location: BodySensorLocation) {
        self.app = app
        self.manager = manager
        self.output = output
        self.planner = RepublishPlanner(location: location)
    }

    func setEnergyReset(_ reset: @escaping @Sendable () async throws -> Void) {
        resetEnergy = reset
    }

    /// Publishes (unless restored) if the adapter is on.
    func begin() async {
        await perform(planner.begin(state: manager.state, services: manager.services, advertisement: manager.advertisement))
    }

    func handle(_ event: PeripheralManagerEvent) async {
        await perform(planner.handle(event))
    }

    /// A measurement's 0x2A37 value, for the subscribers.
    func publish(_ value: [UInt8]) async {
        await perform(planner.measurement(value))
    }

    private func perform(_ actions: [RepublishPlanner.Action]) async {
        // Publishing is a few round trips: not suspended half-way.
        let publishing = actions.contains { if case .publish = $0 { true } else if case .advertise = $0 { true } else { false } }
        let task = publishing ? await app.beginBackgroundTask(name: "publish") : .invalid
        await carryOut(actions)
        await app.endBackgroundTask(task)
    }

    private func carryOut(_ actions: [RepublishPlanner.Action]) async {
        for action in actions {
            switch action {
            case let .write(record):
                output.write(OutputLine(record))
            case let .publish(service):
                do {
                    try await manager.add(service)
                    planner.serviceAdded()
                } catch {
                    fail("publish the Heart Rate Service", error)
                    planner.publishFailed()
                    scheduleRetry()
                    return
                }
            case let .advertise(advertisement):
                do {
                    try await manager.startAdvertising(advertisement)
                    planner.advertisingStarted()
                    output.write(OutputLine(.published(restored: false, localName: advertisement.localName)))
                    say("publishing the Heart Rate Service as '\(advertisement.localName ?? "")'")
                } catch {
                    fail("advertise", error)
                    planner.publishFailed()
                    scheduleRetry()
                    return
                }
            case let .update(value):
                do {
                    let sent = try await manager.updateValue(value, service: HeartRateService.service, characteristic: HeartRateService.measurement)
                    planner.updated(value, sent: sent)
                    if !sent { say("transmit queue full: the latest measurement goes out on readyToUpdate") }
                } catch {
                    fail("update heart rate measurement", error, raw: value)
                }
            case let .resetEnergy(request):
                var error: ATTError?
                if let resetEnergy {
                    do {
                        try await resetEnergy()
                        output.write(OutputLine(.controlPoint(raw: [0x01], action: "resetEnergyExpended")))
                    } catch let failure {
                        fail("reset energy expended", failure, raw: [0x01])
                        error = .unlikelyError
                    }
                } else {
                    error = .unlikelyError
                }
                if request.needsResponse { await respond(request, value: [], error: error) }
            case let .respond(request, value, error):
                await respond(request, value: value, error: error)
            }
        }
    }

    private func respond(_ request: ATTRequest, value: [UInt8], error: ATTError?) async {
        do {
            try await manager.respond(to: request, value: value, error: error)
        } catch {
            fail("answer a request for \(GATTUUID.short(request.characteristic))", error)
        }
    }

    private func fail(_ operation: String, _ error: any Error, raw: [UInt8]? = nil) {
        say("cannot \(operation): \(error)")
        output.write(OutputLine(.error(operation: operation, message: "\(error)", address: nil, raw: raw)))
    }

    private func scheduleRetry() {
        guard !retryScheduled else { return }
        retryScheduled = true
        Task {
            try? await Task.sleep(for: .seconds(Bridge.retryDelay))
            await self.retry()
        }
    }

    private func retry() async {
        retryScheduled = false
        await perform(planner.publishIfNeeded())
        await finishIfBackground(app)
    }
}
