import Testing

@testable import SensorLogger

@Suite struct RuuviFormat5Tests {
    /// The "valid data" test vector of Ruuvi's format 5 specification.
    @Test func decodesTheSpecificationsValidVector() throws {
        let bytes: [UInt8] = [
            0x05, 0x12, 0xFC, 0x53, 0x94, 0xC3, 0x7C, 0x00, 0x04, 0xFF, 0xFC, 0x04, 0x0C, 0xAC, 0x36, 0x42, 0x00, 0xCD,
            0xCB, 0xB8, 0x33, 0x4C, 0x88, 0x4F,
        ]
        let reading = try #require(RuuviReading(manufacturerData: bytes))
        #expect(reading.temperature.map { ($0 * 1000).rounded() / 1000 } == 24.3)
        #expect(reading.humidity.map { ($0 * 100).rounded() / 100 } == 53.49)
        #expect(reading.pressure == 100044)
        #expect(reading.acceleration?.x == 4 && reading.acceleration?.y == -4 && reading.acceleration?.z == 1036)
        #expect(reading.batteryVoltage == 2.977)
        #expect(reading.txPower == 4)
        #expect(reading.movementCounter == 66)
        #expect(reading.sequence == 205)
        #expect(reading.mac == "CB:B8:33:4C:88:4F")
    }

    /// The "not available" vector: every field at its invalid value.
    @Test func readsNotAvailableAsNil() throws {
        let bytes: [UInt8] = [
            0x05, 0x80, 0x00, 0xFF, 0xFF, 0xFF, 0xFF, 0x80, 0x00, 0x80, 0x00, 0x80, 0x00, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
            0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
        ]
        let reading = try #require(RuuviReading(manufacturerData: bytes))
        #expect(reading.temperature == nil && reading.humidity == nil && reading.pressure == nil)
        #expect(reading.acceleration == nil && reading.batteryVoltage == nil && reading.txPower == nil)
        #expect(reading.movementCounter == nil && reading.sequence == nil)
    }

    @Test func refusesOtherFormatsAndShortData() {
        #expect(RuuviReading(manufacturerData: [0x03] + Array(repeating: 0, count: 23)) == nil)
        #expect(RuuviReading(manufacturerData: [0x05, 0x12]) == nil)
    }
}
