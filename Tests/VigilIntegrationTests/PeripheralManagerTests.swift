import Foundation
import Testing
import VigilKit

/// `PeripheralManager` against `FakeDaemon`: routing, holding and
/// acknowledging `ble.peripheral.*` events, `ble.state` shared with a
/// `CentralManager`, request contents and bodies, errors, re-registration and
/// republishing after a reconnection, and the control role's pushes.
@Suite("PeripheralManager (fake daemon)", .serialized, .timeLimit(.minutes(1)))
struct PeripheralManagerTests {
    static let hrs = "0000180d-0000-1000-8000-00805f9b34fb"
    static let measurement = "00002a37-0000-1000-8000-00805f9b34fb"
    static let controlPoint = "00002a39-0000-1000-8000-00805f9b34fb"
    static let central = "AA:BB:CC:DD:EE:01"

    static let heartRate = GATTServiceDefinition(uuid: "180d", characteristics: [
        .init(uuid: "2a37", properties: ["notify"]),
        .init(uuid: "2a38", properties: ["read"], fixedValue: [0x01]),
        .init(uuid: "2a39", properties: ["write"]),
    ])

    static func header<M: Message>(_ message: M) -> String {
        String(decoding: MessageCodec.frame(message).header, as: UTF8.self)
    }

    static func registered(_ state: BluetoothState, restored: PeripheralRestoredState? = nil) -> (header: String, body: [UInt8]) {
        (header(PeripheralRegistered(state: state, restored: restored)), [])
    }

    static func event(_ fake: FakeDaemon, _ seq: UInt64, _ content: PeripheralEventContent, body: [UInt8] = [], redelivered: Bool = false) {
        fake.event(seq, content.kind, content.attributes, body: body, redelivered: redelivered)
    }

    @Test("events before the manager are held, unacknowledged, and come after willRestoreState; each is acked once the next is asked for")
    func heldThenRestoredFirst() async throws {
        let fake = try FakeDaemon()
        defer { fake.stop() }
        let restored = PeripheralRestoredState(
            services: [Self.heartRate], advertisement: AdvertisementData(localName: "HRM", serviceUUIDs: ["180d"]),
            subscribed: [SubscribedCharacteristic(service: Self.hrs, characteristic: Self.measurement)])
        fake.respond { $0.type == RegisterPeripheral.type ? Self.registered(.poweredOn, restored: restored) : nil }
        let app = try await Application.connect(socketPath: fake.path)
        try await fake.expectManagerEventsHeld(by: app) {
            Self.event(fake, 2, .write(request: 5, service: Self.hrs, characteristic: Self.controlPoint, offset: 0, central: Self.central), body: [0x01])
            Self.event(fake, 3, .read(request: 6, service: Self.hrs, characteristic: Self.measurement, offset: 0, central: nil))
        }

        let manager = try await PeripheralManager(application: app, restoreIdentifier: "hrm")
        let registration = try #require(fake.received(RegisterPeripheral.type).first).decode(RegisterPeripheral.self)
        #expect(registration.restoreIdentifier == "hrm")
        #expect(manager.state == .poweredOn)
        // What the daemon restored is what the manager has out.
        #expect(manager.services == [Self.heartRate] && manager.advertisement?.localName == "HRM")

        var events = manager.events.makeAsyncIterator()
        #expect(await events.next() == .willRestoreState(restored))
        let write = ATTRequest(id: 5, service: Self.hrs, characteristic: Self.controlPoint, offset: 0, central: Self.central)
        #expect(await events.next() == .writeRequest(write, value: [0x01]))
        #expect(write.needsResponse && write.matches(service: "180d", characteristic: "2A39"))
        try await Task.sleep(for: .milliseconds(100))
        #expect(fake.acks == [1])
        #expect(await events.next() == .readRequest(ATTRequest(id: 6, service: Self.hrs, characteristic: Self.measurement)))
        try await fake.waitFor("ack 2") { _ in fake.acks.last == 2 }

        fake.event(5, BluetoothEventKind.state, ["state": "poweredOff"])
        #expect(await events.next() == .stateChanged(.poweredOff))
        #expect(manager.state == .poweredOff)
        try await fake.waitFor("ack 4") { _ in fake.acks.last == 4 }
        app.disconnect()
    }

    @Test("requests carry what was asked; values travel in bodies; errors keep their code")
    func requests() async throws {
        let fake = try FakeDaemon()
        defer { fake.stop() }
        let full = Self.header(ValueUpdated(sent: false, subscribed: true))
        fake.respond { message in
            switch message.type {
            case RegisterPeripheral.type: Self.registered(.poweredOn)
            case UpdateValue.type: (full, [])
            case RespondToRequest.type where (try? message.decode(RespondToRequest.self).request) == 99:
                (#"{"type":"error","code":"notFound","message":"request 99 timed out"}"#, [])
            case StartAdvertising.type: (#"{"type":"error","code":"deviceError","message":"org.bluez.Error.Failed: Maximum advertisements reached"}"#, [])
            default: nil
            }
        }
        let app = try await Application.connect(socketPath: fake.path)
        let manager = try await PeripheralManager(application: app)
        #expect(try #require(fake.received(RegisterPeripheral.type).first).decode(RegisterPeripheral.self).restoreIdentifier == nil)

        try await manager.add(Self.heartRate)
        let added = try #require(fake.received(AddService.type).last).decode(AddService.self)
        #expect(added.service == Self.heartRate)
        #expect(added.service.characteristics[1].value == "01" && added.service.characteristics[1].fixedValue == [0x01])
        #expect(manager.services == [Self.heartRate])

        // Reads are answered with the value in the body.
        let read = ATTRequest(id: 7, service: Self.hrs, characteristic: Self.measurement)
        try await manager.respond(to: read, value: [0x06, 0x48])
        let answer = try #require(fake.received(RespondToRequest.type).last)
        #expect(try answer.decode(RespondToRequest.self) == RespondToRequest(request: 7, error: nil))
        #expect(answer.body == [0x06, 0x48])
        // Refusals name the ATT error, with no body.
        try await manager.respond(to: read, value: [0xff], error: .readNotPermitted)
        let refusal = try #require(fake.received(RespondToRequest.type).last)
        #expect(try refusal.decode(RespondToRequest.self) == RespondToRequest(request: 7, error: "readNotPermitted"))
        #expect(refusal.body.isEmpty)
        // A request that timed out in the daemon.
        do {
            try await manager.respond(to: ATTRequest(id: 99, service: Self.hrs, characteristic: Self.measurement))
            Issue.record("respond to a timed-out request did not throw")
        } catch let error as ProtocolError {
            #expect(error.code == .notFound && error.message == "request 99 timed out")
        }
        // A write without response takes no answer: refused without asking the daemon.
        let count = fake.received(RespondToRequest.type).count
        let unanswerable = ATTRequest(id: nil, service: Self.hrs, characteristic: Self.controlPoint)
        #expect(!unanswerable.needsResponse)
        do {
            try await manager.respond(to: unanswerable)
            Issue.record("respond to a write without response did not throw")
        } catch let error as ProtocolError {
            #expect(error.code == .invalidArgument)
        }
        #expect(fake.received(RespondToRequest.type).count == count)

        // Updates carry the value in the body; a full queue says false.
        #expect(try await manager.updateValue([0x06, 0x50], service: "180d", characteristic: "2a37") == false)
        let update = try #require(fake.received(UpdateValue.type).last)
        #expect(try update.decode(UpdateValue.self) == UpdateValue(service: "180d", characteristic: "2a37"))
        #expect(update.body == [0x06, 0x50])
        #expect(try await manager.updateValueReply([0x06], service: "180d", characteristic: "2a37") == ValueUpdated(sent: false, subscribed: true))

        // BlueZ's refusal of an advertisement; nothing is recorded as advertised.
        do {
            try await manager.startAdvertising(AdvertisementData(localName: "HRM", serviceUUIDs: ["180d"]))
            Issue.record("startAdvertising did not throw")
        } catch let error as ProtocolError {
            #expect(error.code == .deviceError && error.message.contains("Maximum advertisements"))
        }
        #expect(manager.advertisement == nil)
        try await manager.stopAdvertising()
        #expect(fake.received(StopAdvertising.type).count == 1)

        try await manager.remove(serviceUUID: Self.hrs)
        #expect(try #require(fake.received(RemoveService.type).last).decode(RemoveService.self).uuid == Self.hrs)
        #expect(manager.services.isEmpty)  // any spelling of the UUID
        try await manager.removeAllServices()
        #expect(try #require(fake.received(RemoveService.type).last).decode(RemoveService.self).uuid == nil)
        app.disconnect()
    }

    @Test("ble.state goes to both managers, acknowledged once; each role's events go to its manager")
    func sharedState() async throws {
        let fake = try FakeDaemon()
        defer { fake.stop() }
        fake.respond { message in
            switch message.type {
            case RegisterPeripheral.type: Self.registered(.poweredOn)
            case RegisterCentral.type: (Self.header(CentralRegistered(state: .poweredOn)), [])
            default: nil
            }
        }
        let app = try await Application.connect(socketPath: fake.path)
        // Only a peripheral manager: the state is its own to acknowledge.
        let peripheral = try await PeripheralManager(application: app)
        var peripheralEvents = peripheral.events.makeAsyncIterator()
        fake.event(1, BluetoothEventKind.state, ["state": "poweredOff"])
        #expect(await peripheralEvents.next() == .stateChanged(.poweredOff))
        fake.event(2, BluetoothEventKind.state, ["state": "poweredOn"])
        #expect(await peripheralEvents.next() == .stateChanged(.poweredOn))
        try await fake.waitFor("ack 1") { _ in fake.acks.last == 1 }

        let central = try await CentralManager(application: app)
        var centralEvents = central.events.makeAsyncIterator()
        fake.event(3, BluetoothEventKind.state, ["state": "resetting"])
        Self.event(fake, 4, .subscribed(service: Self.hrs, characteristic: Self.measurement))
        fake.event(5, BluetoothEventKind.connected, ["peripheral": "C0:FF:EE:00:00:01"])
        #expect(await centralEvents.next() == .stateChanged(.resetting))
        #expect(await centralEvents.next() == .connected("C0:FF:EE:00:00:01"))
        #expect(await peripheralEvents.next() == .stateChanged(.resetting))
        #expect(await peripheralEvents.next() == .subscribed(service: Self.hrs, characteristic: Self.measurement))
        #expect(central.state == .resetting && peripheral.state == .resetting)
        // The central finished 3 (its copy of the state); the peripheral finished 2; 4 and 5 are held by their consumers.
        try await fake.waitFor("ack 3") { _ in fake.acks.last == 3 }
        Self.event(fake, 6, .readyToUpdate)
        #expect(await peripheralEvents.next() == .readyToUpdate)
        try await fake.waitFor("ack 4") { _ in fake.acks.last == 4 }
        _ = centralEvents  // 5 stays with the central until it asks for more
        app.disconnect()
    }

    @Test("a peripheral event before any peripheral manager is held even while a central manager exists")
    func heldWhileCentralExists() async throws {
        let fake = try FakeDaemon()
        defer { fake.stop() }
        fake.respond { message in
            switch message.type {
            case RegisterPeripheral.type: Self.registered(.poweredOn)
            case RegisterCentral.type: (Self.header(CentralRegistered(state: .poweredOn)), [])
            default: nil
            }
        }
        let app = try await Application.connect(socketPath: fake.path)
        let central = try await CentralManager(application: app)
        var centralEvents = central.events.makeAsyncIterator()
        Self.event(fake, 1, .subscribed(service: Self.hrs, characteristic: Self.measurement))
        fake.event(2, BluetoothEventKind.connected, ["peripheral": "C0:FF:EE:00:00:01"])
        #expect(await centralEvents.next() == .connected("C0:FF:EE:00:00:01"))
        Self.event(fake, 3, .unsubscribed(service: Self.hrs, characteristic: Self.measurement))
        try await Task.sleep(for: .milliseconds(100))
        #expect(fake.acks.isEmpty)

        let peripheral = try await PeripheralManager(application: app)
        var events = peripheral.events.makeAsyncIterator()
        #expect(await events.next() == .subscribed(service: Self.hrs, characteristic: Self.measurement))
        #expect(await events.next() == .unsubscribed(service: Self.hrs, characteristic: Self.measurement))
        // 1 finished by the peripheral, 2 still held by the central.
        try await fake.waitFor("ack 1") { _ in fake.acks == [1] }
        app.disconnect()
    }

    @Test("after a reconnection the manager registers again, republishes, and redelivered events are not repeated")
    func reconnection() async throws {
        let fake = try FakeDaemon()
        defer { fake.stop() }
        fake.respond { message in
            switch message.type {
            case RegisterPeripheral.type: Self.registered(.poweredOn)
            case GetBluetoothState.type: (Self.header(BluetoothStateReply(state: .poweredOff, adapter: "hci0")), [])
            default: nil
            }
        }
        let app = try await Application.connect(socketPath: fake.path)
        let manager = try await PeripheralManager(application: app, restoreIdentifier: "hrm")
        var events = manager.events.makeAsyncIterator()
        let advertisement = AdvertisementData(localName: "HRM", serviceUUIDs: ["180d"])
        try await manager.add(Self.heartRate)
        try await manager.startAdvertising(advertisement)

        Self.event(fake, 1, .subscribed(service: Self.hrs, characteristic: Self.measurement))
        Self.event(fake, 2, .read(request: 1, service: Self.hrs, characteristic: Self.measurement, offset: 0, central: nil))
        #expect(await events.next() == .subscribed(service: Self.hrs, characteristic: Self.measurement))
        try await Task.sleep(for: .milliseconds(50))

        fake.dropConnection()
        try await fake.waitFor("the second RegisterPeripheral") { _ in fake.received(RegisterPeripheral.type).count == 2 }
        try await fake.waitFor("the republished advertisement") { _ in fake.received(StartAdvertising.type).count == 2 }
        let again = try #require(fake.received(RegisterPeripheral.type).last)
        #expect(again.id == nil)
        #expect(try again.decode(RegisterPeripheral.self).restoreIdentifier == "hrm")
        let republished = try #require(fake.received(AddService.type).last)
        #expect(republished.id == nil)
        #expect(try republished.decode(AddService.self).service == Self.heartRate)
        #expect(try #require(fake.received(StartAdvertising.type).last).decode(StartAdvertising.self).advertisement == advertisement)
        // Registration, then services, then the advertisement, on the new connection.
        let types = fake.received.map(\.type).drop { $0 != Hello.type }.dropFirst().drop { $0 != Hello.type }
        #expect(Array(types.prefix(4)) == [Hello.type, RegisterPeripheral.type, AddService.type, StartAdvertising.type])

        Self.event(fake, 1, .subscribed(service: Self.hrs, characteristic: Self.measurement), redelivered: true)
        Self.event(fake, 2, .read(request: 1, service: Self.hrs, characteristic: Self.measurement, offset: 0, central: nil), redelivered: true)
        try await fake.waitFor("the state request") { _ in !fake.received(GetBluetoothState.type).isEmpty }
        try await Task.sleep(for: .milliseconds(50))

        #expect(await events.next() == .readRequest(ATTRequest(id: 1, service: Self.hrs, characteristic: Self.measurement)))
        try await fake.waitFor("ack 1 on the new connection") { _ in fake.acks == [1] }
        #expect(await events.next() == .stateChanged(.poweredOff))
        #expect(manager.state == .poweredOff)
        try await fake.waitFor("ack 2") { _ in fake.acks == [1, 2] }
        app.disconnect()
    }

    @Test("unknown ble.peripheral kinds go to Application.events; a second manager replaces the first")
    func unknownAndReplaced() async throws {
        let fake = try FakeDaemon()
        defer { fake.stop() }
        fake.respond { $0.type == RegisterPeripheral.type ? Self.registered(.poweredOn) : nil }
        let app = try await Application.connect(socketPath: fake.path)
        let first = try await PeripheralManager(application: app)
        var appEvents = app.events.makeAsyncIterator()
        fake.event(1, "ble.peripheral.somethingNew", ["x": 1])
        guard case let .event(unknown)? = await appEvents.next() else {
            Issue.record("Application.events ended")
            return
        }
        #expect(unknown.kind == "ble.peripheral.somethingNew" && unknown.peripheralContent == nil && unknown.bluetoothContent == nil)

        let second = try await PeripheralManager(application: app)
        var firstEvents = first.events.makeAsyncIterator()
        #expect(await firstEvents.next() == nil)
        Self.event(fake, 2, .readyToUpdate)
        var events = second.events.makeAsyncIterator()
        #expect(await events.next() == .readyToUpdate)
        app.disconnect()
    }

    @Test("a control client gets peripheral pushes, and the state, as PeripheralManagerEvents")
    func controlPushes() async throws {
        let fake = try FakeDaemon()
        defer { fake.stop() }
        fake.respond { $0.type == UpdateValue.type ? (Self.header(ValueUpdated(sent: true, subscribed: false)), []) : nil }
        let client = try await ControlClient.connect(socketPath: fake.path)
        let events = client.peripheralEvents()
        var iterator = events.makeAsyncIterator()
        let central = client.bluetoothEvents()
        var centralIterator = central.makeAsyncIterator()
        try await client.addService(Self.heartRate)
        #expect(try #require(fake.received(AddService.type).last).decode(AddService.self).service == Self.heartRate)

        let write = PeripheralEventContent.write(request: nil, service: Self.hrs, characteristic: Self.controlPoint, offset: 0, central: nil)
        fake.send(MessageCodec.frame(BluetoothPush(kind: write.kind, attributes: write.attributes), body: [0x01]))
        fake.send(MessageCodec.frame(BluetoothPush(kind: BluetoothEventKind.state, attributes: ["state": "poweredOff"])))
        fake.send(MessageCodec.frame(BluetoothPush(kind: "ble.peripheral.somethingNew", attributes: [:])))
        fake.send(MessageCodec.frame(BluetoothPush(kind: PeripheralEventKind.readyToUpdate, attributes: [:])))
        #expect(await iterator.next() == .writeRequest(ATTRequest(id: nil, service: Self.hrs, characteristic: Self.controlPoint), value: [0x01]))
        #expect(await iterator.next() == .stateChanged(.poweredOff))
        #expect(await iterator.next() == .readyToUpdate)
        // The central listener sees the state, not the peripheral role's pushes.
        #expect(await centralIterator.next() == .stateChanged(.poweredOff))

        try await client.respond(to: ATTRequest(id: 4, service: Self.hrs, characteristic: Self.measurement), value: [0x06, 0x40])
        let answer = try #require(fake.received(RespondToRequest.type).last)
        #expect(try answer.decode(RespondToRequest.self).request == 4 && answer.body == [0x06, 0x40])
        let reply = try await client.updateValue([0x06, 0x41], service: "180d", characteristic: "2a37")
        #expect(reply == ValueUpdated(sent: true, subscribed: false))
        #expect(try #require(fake.received(UpdateValue.type).last).body == [0x06, 0x41])
        client.close()
        #expect(await iterator.next() == nil)
    }
}
