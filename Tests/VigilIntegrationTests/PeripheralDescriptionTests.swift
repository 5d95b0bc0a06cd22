import Foundation
import Testing
import VigilKit

/// The file `vigilctl ble serve` reads (`PeripheralDescription`), and the
/// byte-valued definition builders.
@Suite("vigilctl ble serve file")
struct PeripheralDescriptionTests {
    /// The example of docs/bluetooth.md.
    static let example = """
        {
          "services": [
            {"uuid": "180d", "characteristics": [
              {"uuid": "2a37", "properties": ["notify"]},
              {"uuid": "2a38", "properties": ["read"], "value": "01"},
              {"uuid": "2a39", "properties": ["write"],
               "descriptors": [{"uuid": "2901", "value": "436f6e74726f6c"}]}
            ]},
            {"uuid": "180f", "characteristics": [{"uuid": "2a19", "properties": ["read", "notify"]}]}
          ],
          "advertisement": {"localName": "Vigil HRM", "serviceUUIDs": ["180d"], "appearance": 833,
                            "manufacturerData": {"65535": "0102"}},
          "stdin": "180d/2a37"
        }
        """

    static func parse(_ json: String) throws -> PeripheralDescription {
        try PeripheralDescription(json: Data(json.utf8))
    }

    static func problem(_ json: String) -> String? {
        do {
            _ = try parse(json)
            return nil
        } catch {
            return "\(error)"
        }
    }

    @Test("the documented example reads as the protocol's types")
    func example() throws {
        let description = try Self.parse(Self.example)
        #expect(description.services.count == 2)
        let heartRate = description.services[0]
        #expect(heartRate == GATTServiceDefinition(uuid: "180d", characteristics: [
            .init(uuid: "2a37", properties: ["notify"]),
            .init(uuid: "2a38", properties: ["read"], fixedValue: [0x01]),
            .init(uuid: "2a39", properties: ["write"], descriptors: [.userDescription("Control")]),
        ]))
        var advertisement = AdvertisementData(localName: "Vigil HRM", serviceUUIDs: ["180d"], appearance: 833)
        advertisement.setManufacturerData([0x01, 0x02], company: 0xffff)
        #expect(description.advertisement == advertisement)
        #expect(description.advertisementOrDefault == advertisement)
        #expect(description.stdin == "180d/2a37")
        let fed = try description.characteristic(named: "180d/2a37")
        #expect(fed.service == "180d" && fed.characteristic == "2a37")
        // Any spelling; CHAR alone when only one service has it.
        #expect(try description.characteristic(named: "0000180D-0000-1000-8000-00805F9B34FB/0x2A37").characteristic == "2a37")
        #expect(try description.characteristic(named: "2a19").service == "180f")
    }

    @Test("the least a file needs: services; without an advertisement, the default names the primary services")
    func minimal() throws {
        let description = try Self.parse(#"{"services": [{"uuid": "180f", "characteristics": [{"uuid": "2a19", "properties": ["read"]}]},"#
            + #"{"uuid": "1234", "primary": false, "characteristics": [{"uuid": "2a19", "properties": ["read"]}]}]}"#)
        #expect(description.advertisement == nil && description.stdin == nil)
        #expect(description.advertisementOrDefault == AdvertisementData(serviceUUIDs: ["180f"]))
        // 2a19 is in both services: ambiguous alone.
        #expect(throws: PeripheralDescription.Invalid.self) { try description.characteristic(named: "2a19") }
        #expect(try description.characteristic(named: "1234/2a19").service == "1234")
    }

    @Test("problems are refused with a message saying where")
    func problems() {
        let char = #"{"uuid": "2a37", "properties": ["notify"]}"#
        func file(_ characteristic: String, extra: String = "") -> String {
            #"{"services": [{"uuid": "180d", "characteristics": [\#(characteristic)]}]\#(extra)}"#
        }
        #expect(Self.problem("not json")?.contains("not valid JSON") == true)
        #expect(Self.problem("[]")?.contains("JSON object") == true)
        #expect(Self.problem("{}")?.contains(#"missing "services""#) == true)
        #expect(Self.problem(#"{"services": []}"#)?.contains("empty") == true)
        #expect(Self.problem(file(char, extra: #", "advertisment": {}"#))?.contains(#"unknown key(s) "advertisment""#) == true)
        #expect(Self.problem(#"{"services": [{"uuid": "180d"}]}"#)?.contains(#"missing "characteristics" at services[0]"#) == true)
        #expect(Self.problem(file(#"{"uuid": "xyz", "properties": ["read"]}"#))?.contains("not a UUID") == true)
        #expect(Self.problem(file(#"{"uuid": "2a37", "properties": []}"#))?.contains("no properties") == true)
        #expect(Self.problem(file(#"{"uuid": "2a37", "properties": ["notfy"]}"#))?.contains("unknown property 'notfy'") == true)
        #expect(Self.problem(file(#"{"uuid": "2a38", "properties": ["read"], "value": "0g"}"#))?.contains("not hex") == true)
        #expect(Self.problem(file(#"{"uuid": "2a38", "properties": ["read", "write"], "value": "01"}"#))?.contains("read-only") == true)
        #expect(Self.problem(file(char + "," + char))?.contains("defined twice") == true)
        #expect(Self.problem(file(char, extra: #", "stdin": "2a38""#))?.contains("no characteristic 2a38") == true)
        #expect(Self.problem(file(#"{"uuid": "2a38", "properties": ["read"], "value": "01"}"#, extra: #", "stdin": "2a38""#))?
            .contains("fixed value") == true)
        #expect(Self.problem(file(#"{"uuid": "2a39", "properties": ["write"]}"#, extra: #", "stdin": "2a39""#))?
            .contains("neither read nor notified") == true)
        #expect(Self.problem(file(char, extra: #", "advertisement": {"manufacturerData": {"0xffff": "01"}}"#))?
            .contains("company identifier") == true)
        #expect(Self.problem(file(char, extra: #", "advertisement": {"serviceUUIDs": "180d"}"#))?.contains("advertisement.serviceUUIDs") == true)
    }

    @Test("hex as people write it")
    func hex() {
        #expect(GATTHex.bytes("0x0648") == [0x06, 0x48])
        #expect(GATTHex.bytes("06 48") == [0x06, 0x48] && GATTHex.bytes("06:48") == [0x06, 0x48])
        #expect(GATTHex.bytes("") == [])
        #expect(GATTHex.bytes("064") == nil && GATTHex.bytes("zz") == nil)
        #expect(GATTHex.string([0x00, 0xab, 0x10]) == "00ab10")
        #expect(GATTCharacteristicDefinition(uuid: "2a37", properties: ["notify"]).fixedValue == nil)
        #expect(GATTDescriptorDefinition(uuid: "2901", value: [0x41]).value == "41")
    }
}
