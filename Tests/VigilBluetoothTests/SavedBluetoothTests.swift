import FoundationEssentials
import Testing
@testable import VigilBluetooth

/// The state file's Bluetooth part: files of older daemons still load, and
/// the L2CAP intents a restarted daemon acts on come back as written.
@Suite("Saved Bluetooth intents")
struct SavedBluetoothTests {
    @Test("a state file from before L2CAP intents loads, with none")
    func olderFile() throws {
        let json = #"{"central": {}, "peripheral": {}}"#
        let saved = try JSONDecoder().decode(SavedBluetooth.self, from: Data(json.utf8))
        #expect(saved.l2cap == nil)
        #expect(saved == SavedBluetooth())
    }

    @Test("published PSMs and reopen channels round-trip")
    func roundTrip() throws {
        var saved = SavedBluetooth()
        saved.l2cap = ["org.example.app": SavedL2CAP(
            published: [SavedPSM(psm: 0x85, dynamic: true, security: nil, receiveMTU: 2048, coalesceMilliseconds: 100)],
            channels: [SavedChannel(session: 7, peer: "C0:DE:00:00:00:20", psm: 0x80, security: "medium", receiveMTU: 512,
                                    coalesceMilliseconds: 0)])]
        let decoded = try JSONDecoder().decode(SavedBluetooth.self, from: JSONEncoder().encode(saved))
        #expect(decoded == saved)
        #expect(decoded.l2cap?["org.example.app"]?.published.first?.dynamic == true)
    }
}
