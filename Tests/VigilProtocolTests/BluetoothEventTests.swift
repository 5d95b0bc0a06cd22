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
