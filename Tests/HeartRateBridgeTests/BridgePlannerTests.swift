import Testing
import VigilKit

@testable import HeartRateBridge

private let monitor = "C0:DE:00:00:00:01"
private let hrs = HeartRateService.service
private let hrm = HeartRateService.measurement
private let path = CharacteristicPath(peripheral: monitor, service: hrs, characteristic: hrm)

private func heartRateServices(notifying: Bool, location: Bool = true) -> [GATTServiceInfo] {
    var characteristics = [GATTCharacteristicInfo(uuid: hrm, properties: ["notify"], notifying: notifying)]
    if location { characteristics.append(GATTCharacteristicInfo(uuid: HeartRateService.bodySensorLocation, properties: ["read"])) }
    return [GATTServiceInfo(uuid: hrs, characteristics: characteristics)]
}

/// Only the side effects, without the lines written.
private func effects(_ actions: [BridgePlanner.Action]) -> [BridgePlanner.Action] {
    actions.filter { if case .write = $0 { false } else { true } }
}

private func lines(_ actions: [BridgePlanner.Action]) -> [OutputLine.Record] {
    actions.compactMap { if case let .write(record) = $0 { record } else { nil } }
}

@Suite struct BridgePlannerTests {
    @Test func withAnAddressItConnectsOnceTheAdapterIsOn() {
        var planner = BridgePlanner(wantedAddress: monitor)
        #expect(planner.begin(state: .poweredOff).isEmpty)
        let on = planner.handle(.stateChanged(.poweredOn))
        #expect(lines(on) == [.bluetoothState("poweredOn"), .connecting(address: monitor)])
        #expect(effects(on) == [.connect(monitor)])
        // A second poweredOn (or the delayed begin) asks nothing again.
        #expect(effects(planner.handle(.stateChanged(.poweredOn))).isEmpty)
        #expect(planner.begin(state: .poweredOn).isEmpty)
    }

    @Test func withoutOneItScansForTheServiceAndTakesTheFirstMonitor() {
        var planner = BridgePlanner(wantedAddress: nil)
        #expect(effects(planner.begin(state: .poweredOn)) == [.scan(services: [hrs])])
        let other = PeripheralInfo(address: "11:22:33:44:55:66", serviceUUIDs: [GATTUUID.canonical("180f")!])
        #expect(planner.handle(.discovered(other)).isEmpty)
        let found = planner.handle(.discovered(PeripheralInfo(address: monitor, name: "Vigil HRM", rssi: -50, serviceUUIDs: [hrs])))
        #expect(effects(found) == [.stopScan, .connect(monitor)])
        #expect(lines(found).first == .discovered(address: monitor, name: "Vigil HRM", rssi: -50))
        #expect(planner.target == monitor)
        #expect(planner.handle(.discovered(PeripheralInfo(address: "22:22:22:22:22:22", serviceUUIDs: [hrs]))).isEmpty)
    }

    @Test func connectedThenSetUpOnceThenNothingOnReconnect() {
        var planner = BridgePlanner(wantedAddress: monitor)
        _ = planner.begin(state: .poweredOn)
        let connected = planner.handle(.connected(monitor))
        #expect(lines(connected) == [.connected(address: monitor)])
        #expect(effects(connected) == [.setUp(address: monitor, discover: true, readLocation: true, subscribe: true)])
        planner.servicesDiscovered(heartRateServices(notifying: false))
        #expect(lines(planner.locationValue([1], from: monitor)) == [.bodySensorLocation(address: monitor, location: .chest, raw: [1])])
        #expect(lines(planner.subscriptionConfirmed(monitor)) == [.subscribed(address: monitor, service: hrs, characteristic: hrm)])

        // Link loss: logged, nothing else (the daemon reconnects and resubscribes).
        let lost = planner.handle(.disconnected(monitor, reason: "power off", willReconnect: true))
        #expect(lost == [.write(.disconnected(address: monitor, reason: "power off", willReconnect: true))])
        let back = planner.handle(.connected(monitor))
        #expect(back == [.write(.connected(address: monitor))])
        #expect(planner.subscribed && planner.connected)
    }

    @Test func measurementsAreDecodedAndBadValuesBecomeErrorLines() {
        var planner = BridgePlanner(wantedAddress: monitor)
        let value: [UInt8] = [0x1E, 0x48, 0x64, 0x00, 0x55, 0x03, 0x56, 0x03]
        let want = HeartRateMeasurement(heartRate: 72, sensorContact: .detected, energyExpended: 100, rrIntervalsRaw: [853, 854])
        #expect(planner.handle(.valueUpdated(path, value)) == [.write(.measurement(address: monitor, measurement: want, raw: value))])
        // The short-form spelling names the same characteristic.
        let short = CharacteristicPath(peripheral: monitor, service: "180d", characteristic: "2A37")
        #expect(planner.handle(.valueUpdated(short, value)).count == 1)
        let bad = planner.handle(.valueUpdated(path, [0x01, 0x2C]))
        guard case let .write(.error(operation, message, address, raw))? = bad.first else {
            Issue.record("want an error line, got \(bad)")
            return
        }
        #expect(operation == "decode heart rate measurement" && address == monitor && raw == [0x01, 0x2C])
        #expect(message.contains("heart rate (uint16)"))
        // Other characteristics are not the bridge's business.
        let battery = CharacteristicPath(peripheral: monitor, service: GATTUUID.canonical("180f")!, characteristic: GATTUUID.canonical("2a19")!)
        #expect(planner.handle(.valueUpdated(battery, [99])).isEmpty)
    }

    @Test func restoredConnectedAndSubscribedNeedsNothing() {
        var planner = BridgePlanner(wantedAddress: nil)
        let restored = CentralRestoredState(peripherals: [
            RestoredPeripheral(peripheral: PeripheralInfo(address: monitor, state: "connected", serviceUUIDs: [hrs]),
                               services: heartRateServices(notifying: true)),
        ])
        let actions = planner.handle(.willRestoreState(restored))
        #expect(effects(actions).isEmpty)
        #expect(lines(actions) == [.restored(peripherals: [monitor], address: monitor, connected: true, subscribed: true, scanServices: nil)])
        // The delayed begin and a poweredOn do not scan.
        #expect(planner.begin(state: .poweredOn).isEmpty)
        #expect(effects(planner.handle(.stateChanged(.poweredOn))).isEmpty)
        #expect(planner.handle(.valueUpdated(path, [0x00, 60])).count == 1)
    }

    @Test func restoredConnectedButNotSubscribedSubscribes() {
        var planner = BridgePlanner(wantedAddress: nil)
        let restored = CentralRestoredState(peripherals: [
            RestoredPeripheral(peripheral: PeripheralInfo(address: monitor, state: "connected"), services: heartRateServices(notifying: false)),
        ], scanServices: [hrs])
        #expect(effects(planner.handle(.willRestoreState(restored)))
            == [.stopScan, .setUp(address: monitor, discover: false, readLocation: true, subscribe: true)])
    }

    @Test func restoredPendingConnectWaitsForTheConnection() {
        var planner = BridgePlanner(wantedAddress: monitor)
        let restored = CentralRestoredState(peripherals: [
            RestoredPeripheral(peripheral: PeripheralInfo(address: monitor, state: "connecting"), services: heartRateServices(notifying: true)),
        ])
        #expect(effects(planner.handle(.willRestoreState(restored))).isEmpty)
        #expect(planner.begin(state: .poweredOn).isEmpty)
        // Subscribed already: only Body Sensor Location, once for this process.
        #expect(effects(planner.handle(.connected(monitor))) == [.setUp(address: monitor, discover: false, readLocation: true, subscribe: false)])
        _ = planner.locationValue([2], from: monitor)
        _ = planner.handle(.disconnected(monitor, reason: "timeout", willReconnect: true))
        #expect(effects(planner.handle(.connected(monitor))).isEmpty)
    }

    @Test func restoredScanGoesOn() {
        var planner = BridgePlanner(wantedAddress: nil)
        #expect(effects(planner.handle(.willRestoreState(CentralRestoredState(peripherals: [], scanServices: [hrs])))).isEmpty)
        #expect(planner.begin(state: .poweredOn).isEmpty)
        #expect(effects(planner.handle(.discovered(PeripheralInfo(address: monitor, serviceUUIDs: [hrs])))) == [.stopScan, .connect(monitor)])
    }

    @Test func nothingRestoredStartsAfresh() {
        var planner = BridgePlanner(wantedAddress: monitor)
        planner.noteAdapterState(.poweredOn)
        let actions = planner.handle(.willRestoreState(CentralRestoredState(peripherals: [])))
        #expect(effects(actions) == [.connect(monitor)])
    }

    @Test func theDaemonDroppingTheConnectRequestIsAskedAgain() {
        var planner = BridgePlanner(wantedAddress: monitor)
        _ = planner.begin(state: .poweredOn)
        _ = planner.handle(.connected(monitor))
        _ = planner.subscriptionConfirmed(monitor)
        let dropped = planner.handle(.disconnected(monitor, reason: "cancelled", willReconnect: false))
        #expect(effects(dropped) == [.connect(monitor)])
        #expect(!planner.subscribed)
    }

    @Test func afterAnAdapterPowerCycleTheConnectIsAskedAgain() {
        var planner = BridgePlanner(wantedAddress: monitor)
        _ = planner.begin(state: .poweredOn)
        _ = planner.handle(.connected(monitor))
        #expect(effects(planner.handle(.stateChanged(.poweredOff))).isEmpty)
        #expect(!planner.connected)
        #expect(effects(planner.handle(.stateChanged(.poweredOn))) == [.connect(monitor)])
    }

    @Test func failuresAreRetried() {
        var planner = BridgePlanner(wantedAddress: nil)
        _ = planner.begin(state: .poweredOn)
        planner.startFailed()
        #expect(effects(planner.retry()) == [.scan(services: [hrs])])
        _ = planner.handle(.discovered(PeripheralInfo(address: monitor, serviceUUIDs: [hrs])))
        _ = planner.handle(.connected(monitor))
        planner.servicesDiscovered(heartRateServices(notifying: false))
        _ = planner.locationValue([1], from: monitor)
        // The subscription failed: the retry subscribes, and only that.
        #expect(effects(planner.retry()) == [.setUp(address: monitor, discover: false, readLocation: false, subscribe: true)])
        _ = planner.subscriptionConfirmed(monitor)
        #expect(planner.retry().isEmpty)
    }

    @Test func aBadBodySensorLocationIsAnErrorLineAndNotReadAgain() {
        var planner = BridgePlanner(wantedAddress: monitor)
        let actions = planner.locationValue([1, 2], from: monitor)
        guard case .write(.error(operation: "decode body sensor location", _, monitor, [1, 2]))? = actions.first else {
            Issue.record("want an error line, got \(actions)")
            return
        }
        #expect(planner.locationRead)
    }
}
