import Foundation
import Testing
import VigilProtocol

@Suite("Bluetooth events")
struct BluetoothEventTests {
    static let strap = PeripheralInfo(
        address: "C0:FF:EE:00:00:01", addressType: "random", name: "HRM-Pro", rssi: -61, txPower: 4, state: "disconnected",
        serviceUUIDs: ["0000180d-0000-1000-8000-00805f9b34fb"], manufacturerData: ["89": "0a0b"],
        serviceData: ["0000180d-0000-1000-8000-00805f9b34fb": "01"])

    @Test("every kind round-trips through its attributes")
    func roundTrip() throws {
        let path = CharacteristicPath(
            peripheral: "C0:FF:EE:00:00:01", service: "0000180d-0000-1000-8000-00805f9b34fb",
            characteristic: "00002a37-0000-1000-8000-00805f9b34fb")
        let contents: [BluetoothEventContent] = [
            .state(.poweredOn), .discovered(Self.strap), .connected(peripheral: "C0:FF:EE:00:00:01"),
            .disconnected(peripheral: "C0:FF:EE:00:00:01", reason: "link loss", willReconnect: true), .notification(path),
            .pairingRequest(PairingPrompt(request: 3, peripheral: "C0:FF:EE:00:00:01", kind: .confirm, passkey: 42, timeout: 20)),
            .pairingRequest(PairingPrompt(request: 4, peripheral: "C0:FF:EE:00:00:01", kind: .displayPasskey, passkey: 7, entered: 2)),
            .pairingCancelled(request: 3, peripheral: "C0:FF:EE:00:00:01", reason: "nobody answered"),
            .addressChanged(peripheral: "C0:DE:00:00:00:99", previous: "5A:11:22:33:44:55"),
            .connected(peripheral: "C0:FF:EE:00:00:01", adapter: "hci1"),
            .disconnected(peripheral: "C0:FF:EE:00:00:01", reason: "adapter off", willReconnect: true, adapter: "hci1"),
            .notification(CharacteristicPath(peripheral: path.peripheral, service: path.service, characteristic: path.characteristic, instance: 1)),
            .adapterState(adapter: "hci1", state: .poweredOff),
            .pairingEnded(PairingState(peripheral: "C0:FF:EE:00:00:01", paired: true, bonded: true, trusted: false), error: nil),
            .pairingEnded(
                PairingState(peripheral: "C0:FF:EE:00:00:01", paired: false, bonded: false, trusted: false),
                error: "pairing with C0:FF:EE:00:00:01 failed: AuthenticationFailed"),
        ]
        for content in contents {
            #expect(try BluetoothEventContent(kind: content.kind, attributes: content.attributes) == content)
        }
        #expect(BluetoothEventContent.notification(path).peripheral == "C0:FF:EE:00:00:01")
        #expect(BluetoothEventContent.state(.poweredOff).peripheral == nil)
        #expect(PairingPrompt(request: 1, peripheral: "C0:FF:EE:00:00:01", kind: .confirm, passkey: 4207).passkeyText == "004207")
        #expect(!PairingPromptKind.displayPasskey.needsAnswer && PairingPromptKind.passkey.needsAnswer)
    }

    @Test("attributes as they come off the wire decode too")
    func fromWireJSON() throws {
        let header = #"{"type":"event","seq":9,"kind":"ble.discovered","redelivered":false,"attributes":{"address":"C0:FF:EE:00:00:01","#
            + #""addressType":"random","name":"HRM-Pro","rssi":-61,"state":"disconnected","serviceUUIDs":["0000180d-0000-1000-8000-00805f9b34fb"],"#
            + #""manufacturerData":{},"serviceData":{}}}"#
        let event: EventMessage = try IncomingMessage(frame: Frame(header: Array(header.utf8))).decode()
        let content = try BluetoothEventContent(kind: event.kind, attributes: event.attributes)
        guard case let .discovered(peripheral)? = content else { Issue.record("decoded \(String(describing: content))"); return }
        #expect(peripheral.rssi == -61 && peripheral.name == "HRM-Pro" && peripheral.txPower == nil && peripheral.addressType == "random")
    }

    @Test("a discovery needs only the address; a disconnect only the peripheral")
    func lenient() throws {
        let content = try BluetoothEventContent(kind: BluetoothEventKind.discovered, attributes: ["address": "AA:BB:CC:DD:EE:FF"])
        #expect(content == .discovered(PeripheralInfo(address: "AA:BB:CC:DD:EE:FF")))
        let disconnected = try BluetoothEventContent(kind: BluetoothEventKind.disconnected, attributes: ["peripheral": "AA:BB:CC:DD:EE:FF"])
        #expect(disconnected == .disconnected(peripheral: "AA:BB:CC:DD:EE:FF", reason: "", willReconnect: false))
        // A state a newer daemon adds is unknown, not an error.
        #expect(try BluetoothEventContent(kind: BluetoothEventKind.state, attributes: ["state": "poweringOn"]) == .state(.unknown))
    }

    @Test("a characteristic's instance: absent means 0, in attributes, JSON and batch records")
    func instances() throws {
        let first = CharacteristicPath(peripheral: "C0:FF:EE:00:00:01", service: "181a", characteristic: "2a6e")
        var second = first
        second.instance = 1
        #expect(BluetoothEventContent.notification(first).attributes["instance"] == nil)
        #expect(BluetoothEventContent.notification(second).attributes["instance"] == .number(1))
        #expect(throws: ProtocolError.self) {
            var attributes = BluetoothEventContent.notification(second).attributes
            attributes["instance"] = .number(-1)
            _ = try BluetoothEventContent(kind: BluetoothEventKind.notification, attributes: attributes)
        }
        let encoded = try JSONEncoder().encode(first)
        #expect(!String(decoding: encoded, as: UTF8.self).contains("instance"), "0 is not written: older readers see what they know")
        #expect(try JSONDecoder().decode(CharacteristicPath.self, from: encoded) == first)
        #expect(try JSONDecoder().decode(CharacteristicPath.self, from: JSONEncoder().encode(second)) == second)
        #expect(first < second && second.description.hasSuffix("#1"))
        // A batch whose event names instance 0 carries instance 1's value in a record naming it.
        var body: [UInt8] = []
        NotificationValues.append([1], of: first, in: first, to: &body)
        NotificationValues.append([2], of: second, in: first, to: &body)
        let values = try NotificationValues.decode(body, attributes: NotificationValues.attributes(of: first), path: first)
        #expect(values.map(\.path) == [first, second] && values.map(\.value) == [[1], [2]])
        #expect(ReadCharacteristic(second).path == second && ReadCharacteristic(first).instance == nil)
    }

    @Test("other kinds are not Bluetooth events; malformed ones are errors")
    func otherAndMalformed() throws {
        #expect(try BluetoothEventContent(kind: "test", attributes: [:]) == nil)
        #expect(try BluetoothEventContent(kind: "ble.somethingNew", attributes: [:]) == nil)
        #expect(BluetoothEventContent.isBluetoothKind("ble.somethingNew") && !BluetoothEventContent.isBluetoothKind("session.data"))
        #expect(throws: ProtocolError.self) { try BluetoothEventContent(kind: "ble.state", attributes: [:]) }
        #expect(throws: ProtocolError.self) { try BluetoothEventContent(kind: "ble.connected", attributes: ["peripheral": 3]) }
        #expect(throws: ProtocolError.self) {
            try BluetoothEventContent(kind: "ble.notification", attributes: ["peripheral": "AA:BB:CC:DD:EE:FF", "service": "180d"])
        }
        #expect(throws: ProtocolError.self) { try BluetoothEventContent(kind: "ble.discovered", attributes: ["name": "x"]) }
    }

    @Test("held-back events block the acknowledgement until assigned and finished")
    func heldBack() {
        var ledger = AcknowledgementLedger()
        ledger.received(1, for: .events)
        ledger.received(2, for: nil)  // a ble.* event before any CentralManager
        ledger.received(3, for: .events)
        #expect(ledger.finish(.events, upTo: 3) == 1)
        ledger.assign(2, to: .session(-1))
        #expect(ledger.finish(.session(-1), upTo: 2) == 3)
    }
}
