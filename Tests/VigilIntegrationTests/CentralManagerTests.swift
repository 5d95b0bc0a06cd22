import Foundation
import Testing
import VigilKit

/// `CentralManager` against `FakeDaemon`: routing, holding and acknowledging
/// `ble.*` events, requests and errors, re-registration after a reconnection.
/// No vigild, no BlueZ: these run anywhere, in well under a second each.
@Suite("CentralManager (fake daemon)", .serialized, .timeLimit(.minutes(1)))
struct CentralManagerTests {
    static let strap = "C0:FF:EE:00:00:01"
    static let heartRate = CharacteristicPath(
        peripheral: strap, service: "0000180d-0000-1000-8000-00805f9b34fb", characteristic: "00002a37-0000-1000-8000-00805f9b34fb")

    static func header<M: Message>(_ message: M) -> String {
        String(decoding: MessageCodec.frame(message).header, as: UTF8.self)
    }

    static func registered(_ state: BluetoothState, restored: CentralRestoredState? = nil) -> (header: String, body: [UInt8]) {
        (header(CentralRegistered(state: state, restored: restored)), [])
    }

    @Test("events before the manager are held, unacknowledged, and come after willRestoreState; each is acked once the next is asked for")
    func heldThenRestoredFirst() async throws {
        let fake = try FakeDaemon()
        defer { fake.stop() }
        let restored = CentralRestoredState(
            peripherals: [RestoredPeripheral(peripheral: PeripheralInfo(address: Self.strap, state: "connected"), services: [])])
        fake.respond { message in
            message.type == RegisterCentral.type ? Self.registered(.poweredOn, restored: restored) : nil
        }
        let app = try await Application.connect(socketPath: fake.path)
        try await fake.expectManagerEventsHeld(by: app) {
            fake.event(2, BluetoothEventKind.connected, ["peripheral": .string(Self.strap)])
            fake.event(3, BluetoothEventKind.notification, BluetoothEventContent.notification(Self.heartRate).attributes, body: [0x06, 0x48])
        }

        let central = try await CentralManager(application: app, restoreIdentifier: "hrm")
        let registration = try #require(fake.received(RegisterCentral.type).first).decode(RegisterCentral.self)
        #expect(registration.restoreIdentifier == "hrm")
        #expect(central.state == .poweredOn)

        var events = central.events.makeAsyncIterator()
        #expect(await events.next() == .willRestoreState(restored))
        #expect(await events.next() == .connected(Self.strap))
        // Taken, not finished: nothing more is acknowledged.
        try await Task.sleep(for: .milliseconds(100))
        #expect(fake.acks == [1])
        #expect(await events.next() == .valueUpdated(Self.heartRate, [0x06, 0x48]))
        try await fake.waitFor("ack 2") { _ in fake.acks.last == 2 }

        fake.event(5, BluetoothEventKind.state, ["state": "poweredOff"])
        #expect(await events.next() == .stateChanged(.poweredOff))
        #expect(central.state == .poweredOff)
        // Done with 3: the acknowledged prefix reaches 4 (the app finished it long ago).
        try await fake.waitFor("ack 4") { _ in fake.acks.last == 4 }
        app.disconnect()
    }

    @Test("events after the manager go to it; unknown ble kinds go to Application.events")
    func liveAndUnknown() async throws {
        let fake = try FakeDaemon()
        defer { fake.stop() }
        fake.respond { $0.type == RegisterCentral.type ? Self.registered(.poweredOn) : nil }
        let app = try await Application.connect(socketPath: fake.path)
        let central = try await CentralManager(application: app)
        var events = central.events.makeAsyncIterator()
        var appEvents = app.events.makeAsyncIterator()

        let discovered = PeripheralInfo(address: Self.strap, addressType: "random", name: "HRM", rssi: -60, serviceUUIDs: ["0000180d-0000-1000-8000-00805f9b34fb"])
        fake.event(1, BluetoothEventKind.discovered, discovered.attributes)
        fake.event(2, "ble.somethingNew", ["x": 1])
        fake.event(3, BluetoothEventKind.disconnected, ["peripheral": .string(Self.strap), "reason": "link loss", "willReconnect": true])

        #expect(await events.next() == .discovered(discovered))
        #expect(await events.next() == .disconnected(Self.strap, reason: "link loss", willReconnect: true))
        guard case let .event(unknown)? = await appEvents.next() else {
            Issue.record("Application.events ended")
            return
        }
        #expect(unknown.kind == "ble.somethingNew" && unknown.bluetoothContent == nil)
        app.acknowledge(unknown)
        // 1 finished (the central asked for 3); 2 acknowledged by the app; 3 still held by the consumer.
        try await fake.waitFor("ack 2") { _ in fake.acks.last == 2 }
        app.disconnect()
    }

    @Test("a batched notification yields each value in order and is acknowledged once, after the last; a malformed batch goes to Application.events")
    func batchedNotification() async throws {
        let fake = try FakeDaemon()
        defer { fake.stop() }
        fake.respond { $0.type == RegisterCentral.type ? Self.registered(.poweredOn) : nil }
        let app = try await Application.connect(socketPath: fake.path)
        let central = try await CentralManager(application: app)
        var events = central.events.makeAsyncIterator()
        var appEvents = app.events.makeAsyncIterator()
        let battery = CharacteristicPath(
            peripheral: Self.strap, service: "0000180f-0000-1000-8000-00805f9b34fb", characteristic: "00002a19-0000-1000-8000-00805f9b34fb")

        var body: [UInt8] = []
        NotificationValues.append([0x06, 60], of: Self.heartRate, in: Self.heartRate, to: &body)
        NotificationValues.append([99], of: battery, in: Self.heartRate, to: &body)
        NotificationValues.append([0x06, 61], of: Self.heartRate, in: Self.heartRate, to: &body)
        fake.event(1, BluetoothEventKind.notification, NotificationValues.attributes(of: Self.heartRate), body: body)
        fake.event(2, BluetoothEventKind.notification, BluetoothEventContent.notification(Self.heartRate).attributes, body: [0x06, 62])
        fake.event(3, BluetoothEventKind.notification, NotificationValues.attributes(of: Self.heartRate), body: [9, 0, 1])

        #expect(await events.next() == .valueUpdated(Self.heartRate, [0x06, 60]))
        #expect(await events.next() == .valueUpdated(battery, [99]))
        // Two of the event's three values handed out (and the first two finished): not acknowledged.
        #expect(await events.next() == .valueUpdated(Self.heartRate, [0x06, 61]))
        try await Task.sleep(for: .milliseconds(150))
        #expect(fake.acks.isEmpty)
        // An unframed event (an older daemon's) is one value; asking for it finishes the batch.
        #expect(await events.next() == .valueUpdated(Self.heartRate, [0x06, 62]))
        try await fake.waitFor("ack 1") { _ in fake.acks == [1] }
        guard case let .event(malformed)? = await appEvents.next() else {
            Issue.record("Application.events ended")
            return
        }
        #expect(malformed.seq == 3 && malformed.kind == BluetoothEventKind.notification)
        app.acknowledge(malformed)
        try await Task.sleep(for: .milliseconds(150))
        #expect(fake.acks == [1], "2 is still held by the central's loop")
        app.disconnect()
    }

    @Test("requests carry what was asked; values travel in bodies; errors keep their code")
    func requests() async throws {
        let fake = try FakeDaemon()
        defer { fake.stop() }
        let known = PeripheralInfo(address: Self.strap, name: "HRM", state: "connected", mtu: 185)
        fake.respond { message in
            switch message.type {
            case RegisterCentral.type: Self.registered(.poweredOn)
            case ReadCharacteristic.type: (#"{"type":"reply"}"#, [0x64])
            case ListPeripherals.type: (Self.header(PeripheralList(peripherals: [known])), [])
            case DiscoverServices.type: (#"{"type":"error","code":"notConnected","message":"C0:FF:EE:00:00:01 is not connected"}"#, [])
            default: nil
            }
        }
        let app = try await Application.connect(socketPath: fake.path)
        let central = try await CentralManager(application: app)

        try await central.scanForPeripherals(withServices: ["180d"])
        let scan = try #require(fake.received(StartScan.type).last).decode(StartScan.self)
        #expect(scan == StartScan(services: ["180d"], allowDuplicates: nil))
        try await central.scanForPeripherals(withServices: nil, allowDuplicates: true)
        #expect(try #require(fake.received(StartScan.type).last).decode(StartScan.self) == StartScan(services: nil, allowDuplicates: true))
        try await central.stopScan()
        try await central.connect(Self.strap)
        #expect(try #require(fake.received(ConnectPeripheral.type).last).decode(ConnectPeripheral.self).peripheral == Self.strap)
        #expect(try await central.knownPeripherals() == [known])

        let strap = central.peripheral(Self.strap)
        #expect(try await strap.readValue(service: "180f", characteristic: "2a19") == [0x64])
        let read = try #require(fake.received(ReadCharacteristic.type).last).decode(ReadCharacteristic.self)
        #expect(read.service == "180f" && read.characteristic == "2a19" && read.descriptor == nil)

        try await strap.writeValue([0x01, 0x02], service: "180d", characteristic: "2a39", withResponse: false)
        let write = try #require(fake.received(WriteCharacteristic.type).last)
        #expect(write.body == [0x01, 0x02])
        #expect(try write.decode(WriteCharacteristic.self).withResponse == false)

        try await strap.setNotifyValue(true, service: "180d", characteristic: "2a37", acquire: true)
        let notify = try #require(fake.received(SetNotify.type).last).decode(SetNotify.self)
        #expect(notify.enabled && notify.acquire == true && notify.characteristic == "2a37")
        // The default leaves the choice to the daemon: no `acquire` member at all.
        try await strap.setNotifyValue(true, service: "180d", characteristic: "2a37")
        let byDefault = try #require(fake.received(SetNotify.type).last)
        #expect(try byDefault.decode(SetNotify.self).acquire == nil)
        #expect(!String(decoding: byDefault.frame.header, as: UTF8.self).contains("acquire"))

        do {
            _ = try await strap.discoverServices()
            Issue.record("discoverServices did not throw")
        } catch let error as ProtocolError {
            #expect(error.code == .notConnected)
        }
        try await central.cancelPeripheralConnection(Self.strap)
        #expect(fake.received(CancelPeripheralConnection.type).count == 1)
        app.disconnect()
    }

    @Test("after a reconnection the central registers again, its state is refreshed, and redelivered events are not repeated")
    func reconnection() async throws {
        let fake = try FakeDaemon()
        defer { fake.stop() }
        fake.respond { message in
            switch message.type {
            case RegisterCentral.type: Self.registered(.poweredOn)
            case GetBluetoothState.type: (Self.header(BluetoothStateReply(state: .poweredOff, adapter: "hci0")), [])
            default: nil
            }
        }
        let app = try await Application.connect(socketPath: fake.path)
        let central = try await CentralManager(application: app, restoreIdentifier: "hrm")
        var events = central.events.makeAsyncIterator()
        let (a, b, c) = ("AA:AA:AA:AA:AA:01", "AA:AA:AA:AA:AA:02", "AA:AA:AA:AA:AA:03")

        fake.event(1, BluetoothEventKind.connected, ["peripheral": .string(a)])
        fake.event(2, BluetoothEventKind.connected, ["peripheral": .string(b)])
        #expect(await events.next() == .connected(a))  // taken, not finished
        try await Task.sleep(for: .milliseconds(50))    // 2 is in the central's buffer

        fake.dropConnection()
        try await fake.waitFor("the second RegisterCentral") { _ in fake.received(RegisterCentral.type).count == 2 }
        let again = try #require(fake.received(RegisterCentral.type).last)
        #expect(again.id == nil)
        #expect(try again.decode(RegisterCentral.self).restoreIdentifier == "hrm")
        // The new daemon redelivers what was not acknowledged.
        fake.event(1, BluetoothEventKind.connected, ["peripheral": .string(a)], redelivered: true)
        fake.event(2, BluetoothEventKind.connected, ["peripheral": .string(b)], redelivered: true)
        try await fake.waitFor("the state request") { _ in !fake.received(GetBluetoothState.type).isEmpty }
        try await Task.sleep(for: .milliseconds(50))

        #expect(await events.next() == .connected(b))
        try await fake.waitFor("ack 1 on the new connection") { _ in fake.acks == [1] }
        #expect(await events.next() == .stateChanged(.poweredOff))
        #expect(central.state == .poweredOff)
        try await fake.waitFor("ack 2") { _ in fake.acks == [1, 2] }
        fake.event(3, BluetoothEventKind.connected, ["peripheral": .string(c)])
        #expect(await events.next() == .connected(c))
        app.disconnect()
    }

    @Test("GATTUUID reads every spelling")
    func uuids() {
        #expect(GATTUUID.canonical("180D") == "0000180d-0000-1000-8000-00805f9b34fb")
        #expect(GATTUUID.canonical("0x2a37") == "00002a37-0000-1000-8000-00805f9b34fb")
        #expect(GATTUUID.short("0000180d-0000-1000-8000-00805f9b34fb") == "180d")
        #expect(GATTUUID.short("6e400001-b5a3-f393-e0a9-e50e24dcca9e") == "6e400001-b5a3-f393-e0a9-e50e24dcca9e")
        #expect(Self.heartRate.matches(service: "180d", characteristic: "2A37"))
        #expect(!Self.heartRate.matches(service: "180d", characteristic: "2a38"))
    }
}
