import Testing
import VigilProtocol

@Suite("Bluetooth UUIDs")
struct BluetoothUUIDTests {
    @Test(arguments: [
        ("180d", "0000180d-0000-1000-8000-00805f9b34fb"),
        ("0x180D", "0000180d-0000-1000-8000-00805f9b34fb"),
        ("0000180D", "0000180d-0000-1000-8000-00805f9b34fb"),
        ("0000180D-0000-1000-8000-00805F9B34FB", "0000180d-0000-1000-8000-00805f9b34fb"),
        ("6e400001b5a3f393e0a9e50e24dcca9e", "6e400001-b5a3-f393-e0a9-e50e24dcca9e"),
    ])
    func normalizes(_ input: String, _ canonical: String) {
        #expect(BluetoothUUID.normalize(input) == canonical)
    }

    @Test(arguments: ["", "18", "180g", "12345", "0x", "180d-0000"])
    func rejects(_ input: String) {
        #expect(BluetoothUUID.normalize(input) == nil)
    }

    @Test func matchesAnySpelling() {
        #expect(BluetoothUUID.matches("2A37", "00002a37-0000-1000-8000-00805f9b34fb"))
        #expect(!BluetoothUUID.matches("2a37", "2a38"))
    }

    @Test func shortFormOnlyOnTheBase() {
        #expect(BluetoothUUID.short("0000180d-0000-1000-8000-00805f9b34fb") == "180d")
        #expect(BluetoothUUID.short("6e400001-b5a3-f393-e0a9-e50e24dcca9e") == "6e400001-b5a3-f393-e0a9-e50e24dcca9e")
    }
}
