import Testing

@testable import HeartRateBridge

private typealias Contact = HeartRateMeasurement.SensorContact

/// Little-endian uint16, written out by hand (not with the code under test).
private func le(_ value: UInt16) -> [UInt8] { [UInt8(value & 0xFF), UInt8(value >> 8)] }

@Suite struct HeartRateMeasurementTests {
    /// Every combination of the five defined flag bits, with reserved bits 5-7
    /// clear and set: the value is built by hand from the flags and decoded.
    @Test(arguments: 0..<32)
    func everyFlagCombination(_ flags: Int) throws {
        let flags = UInt8(flags)
        let is16Bit = flags & 0x01 != 0
        let rate = is16Bit ? 0x0123 : 0x57
        var value: [UInt8] = is16Bit ? le(UInt16(rate)) : [UInt8(rate)]
        let energy: Int? = flags & 0x08 != 0 ? 0xBEEF : nil
        if let energy { value += le(UInt16(energy)) }
        let rr: [UInt16] = flags & 0x10 != 0 ? [1024, 512, 0xABCD] : []
        for interval in rr { value += le(interval) }
        let contact: Contact =
            switch (flags & 0x04 != 0, flags & 0x02 != 0) {
            case (true, true): .detected
            case (true, false): .notDetected
            case (false, _): .notSupported
            }
        let want = HeartRateMeasurement(
            heartRate: rate, is16Bit: is16Bit, sensorContact: contact, energyExpended: energy, rrIntervalsRaw: rr)
        for reserved: UInt8 in [0x00, 0xE0, 0x20, 0x80] {
            #expect(try HeartRateMeasurement(bytes: [flags | reserved] + value) == want, "flags 0x\(String(flags | reserved, radix: 16))")
        }
        // And the encoder writes the hand-built bytes back (bit 1 alone, which
        // says nothing without bit 2, is not reproduced).
        let canonicalFlags = flags & 0x04 == 0 ? flags & ~0x02 : flags
        #expect(want.bytes == [canonicalFlags] + value)
    }

    /// What the lab's Bumble monitor sends (`lab/peers/heart_rate_monitor.py`):
    /// `--format uint8 --rate 72 --contact yes --energy 100 --rr 2`.
    @Test func theLabMonitorsFirstUint8Measurement() throws {
        let value: [UInt8] = [0x1E, 0x48, 0x64, 0x00, 0x55, 0x03, 0x56, 0x03]
        let m = try HeartRateMeasurement(bytes: value)
        #expect(m == HeartRateMeasurement(
            heartRate: 72, is16Bit: false, sensorContact: .detected, energyExpended: 100, rrIntervalsRaw: [853, 854]))
        #expect(m.rrIntervals == [853.0 / 1024, 854.0 / 1024])
    }

    @Test func uint16RatesAbove255() throws {
        for rate in [256, 300, 0x1234, 65535] {
            let m = try HeartRateMeasurement(bytes: [0x01] + le(UInt16(rate)))
            #expect(m.heartRate == rate && m.is16Bit)
            #expect(m.sensorContact == .notSupported && m.energyExpended == nil && m.rrIntervalsRaw.isEmpty)
        }
        // `--format uint16 --rate 300 --contact no --rr 3`, the monitor's first value.
        let m = try HeartRateMeasurement(bytes: [0x15, 0x2C, 0x01, 0xCD, 0x00, 0xCE, 0x00, 0xCF, 0x00])
        #expect(m == HeartRateMeasurement(
            heartRate: 300, is16Bit: true, sensorContact: .notDetected, rrIntervalsRaw: [205, 206, 207]))
    }

    @Test func aSmallRateInUint16FormatIsStill16Bit() throws {
        let m = try HeartRateMeasurement(bytes: [0x01, 60, 0])
        #expect(m.heartRate == 60 && m.is16Bit)
    }

    @Test func severalRRIntervalsOldestFirstInSeconds() throws {
        let raw: [UInt16] = [1024, 512, 256, 1, 0, 65535, 800, 900, 1000]
        let m = try HeartRateMeasurement(bytes: [0x10, 70] + raw.flatMap(le))
        #expect(m.rrIntervalsRaw == raw)
        let seconds: [Double] = [1.0, 0.5, 0.25, 0.0009765625, 0, 63.9990234375, 0.78125, 0.87890625, 0.9765625]
        #expect(m.rrIntervals == seconds)
    }

    @Test func rrFlagWithNoIntervalsIsAnEmptyList() throws {
        let m = try HeartRateMeasurement(bytes: [0x18, 70, 0x10, 0x00])
        #expect(m.rrIntervalsRaw.isEmpty && m.energyExpended == 16)
    }

    @Test func contactDetectedWithoutSupportMeansNotSupported() throws {
        #expect(try HeartRateMeasurement(bytes: [0x02, 70]).sensorContact == .notSupported)
        #expect(try HeartRateMeasurement(bytes: [0x04, 70]).sensorContact == .notDetected)
        #expect(try HeartRateMeasurement(bytes: [0x06, 70]).sensorContact == .detected)
        #expect(try HeartRateMeasurement(bytes: [0x00, 70]).sensorContact == .notSupported)
    }

    @Test func extremes() throws {
        let m = try HeartRateMeasurement(bytes: [0x19] + le(65535) + le(65535) + le(65535))
        #expect(m == HeartRateMeasurement(heartRate: 65535, is16Bit: true, energyExpended: 65535, rrIntervalsRaw: [65535]))
        #expect(try HeartRateMeasurement(bytes: [0x08, 0, 0, 0]) == HeartRateMeasurement(heartRate: 0, energyExpended: 0))
    }

    // MARK: Errors

    @Test func anEmptyValue() {
        #expect(throws: HeartRateMeasurementError.empty) { try HeartRateMeasurement(bytes: []) }
        #expect(HeartRateMeasurementError.empty.description.contains("empty value"))
    }

    @Test(arguments: [
        // flags only: no heart rate
        ([0x00], HeartRateMeasurementError.truncated(field: "heart rate (uint8)", offset: 1, needed: 1, available: 0, length: 1)),
        ([0x01], .truncated(field: "heart rate (uint16)", offset: 1, needed: 2, available: 0, length: 1)),
        ([0x01, 0x2C], .truncated(field: "heart rate (uint16)", offset: 1, needed: 2, available: 1, length: 2)),
        ([0x08, 70], .truncated(field: "energy expended", offset: 2, needed: 2, available: 0, length: 2)),
        ([0x08, 70, 0x64], .truncated(field: "energy expended", offset: 2, needed: 2, available: 1, length: 3)),
        ([0x09, 0x2C, 0x01, 0x64], .truncated(field: "energy expended", offset: 3, needed: 2, available: 1, length: 4)),
        ([0x10, 70, 0x55], .truncated(field: "RR interval 1", offset: 2, needed: 2, available: 1, length: 3)),
        ([0x10, 70, 0x55, 0x03, 0x56], .truncated(field: "RR interval 2", offset: 4, needed: 2, available: 1, length: 5)),
        ([0x18, 70, 0x64, 0x00, 0x55, 0x03, 0x56, 0x03, 0x57],
         .truncated(field: "RR interval 3", offset: 8, needed: 2, available: 1, length: 9)),
        ([0x00, 70, 0x00], .trailingBytes(count: 1, length: 3, flags: 0x00)),
        ([0x0E, 70, 0x64, 0x00, 0x01, 0x02], .trailingBytes(count: 2, length: 6, flags: 0x0E)),
    ] as [([UInt8], HeartRateMeasurementError)])
    func truncatedOrOverlongValues(_ value: [UInt8], _ error: HeartRateMeasurementError) {
        #expect(throws: error) { try HeartRateMeasurement(bytes: value) }
    }

    @Test func errorsNameTheFieldAndTheSizes() {
        let truncated = HeartRateMeasurementError.truncated(field: "energy expended", offset: 2, needed: 2, available: 1, length: 3)
        #expect(truncated.description == "truncated value (3 bytes): energy expended at byte 2 needs 2 bytes, 1 left")
        let trailing = HeartRateMeasurementError.trailingBytes(count: 1, length: 3, flags: 0x06)
        #expect(trailing.description == "1 unexpected byte at the end of a 3-byte value (flags 0x06 announce no more fields)")
    }

    // MARK: Encoding

    @Test func encodeDecodeRoundTrip() throws {
        for contact in Contact.allCases {
            for m in [
                HeartRateMeasurement(heartRate: 61, sensorContact: contact),
                HeartRateMeasurement(heartRate: 400, is16Bit: true, sensorContact: contact, energyExpended: 7),
                HeartRateMeasurement(heartRate: 90, sensorContact: contact, rrIntervalsRaw: [700, 701, 702, 703]),
                HeartRateMeasurement(heartRate: 255, is16Bit: false, sensorContact: contact, energyExpended: 65535, rrIntervalsRaw: [1]),
            ] {
                #expect(try HeartRateMeasurement(bytes: m.bytes) == m)
            }
        }
    }
}

@Suite struct BodySensorLocationTests {
    @Test func theDefinedLocations() throws {
        let names = ["other", "chest", "wrist", "finger", "hand", "earLobe", "foot"]
        let cases: [BodySensorLocation] = [.other, .chest, .wrist, .finger, .hand, .earLobe, .foot]
        for (value, (name, location)) in zip(names, cases).enumerated() {
            let decoded = try BodySensorLocation(bytes: [UInt8(value)])
            #expect(decoded == location)
            #expect(decoded.name == name)
            #expect(decoded.rawValue == UInt8(value))
        }
    }

    @Test func reservedValuesAreKept() throws {
        for value: UInt8 in [7, 0x80, 255] {
            let location = try BodySensorLocation(bytes: [value])
            #expect(location == .reserved(value) && location.rawValue == value && location.name == "reserved")
        }
    }

    @Test func aValueMustBeOneByte() {
        #expect(throws: HeartRateMeasurementError.wrongLength(field: "body sensor location", length: 0, expected: 1)) {
            try BodySensorLocation(bytes: [])
        }
        #expect(throws: HeartRateMeasurementError.wrongLength(field: "body sensor location", length: 2, expected: 1)) {
            try BodySensorLocation(bytes: [1, 0])
        }
    }
}
