import Testing
import VigilKit

@testable import HeartRateBridge



@Suite struct HeartRateEncoderTests {
    /// encode -> decode is the identity for every flag combination (format,
    /// the three contact states, energy absent/present, RR none/some) and
    /// edge values.
    @Test(arguments: [false, true], HeartRateMeasurement.SensorContact.allCases)
    func roundTrip(is16Bit: Bool, contact: HeartRateMeasurement.SensorContact) throws {
        let rates = is16Bit ? [0, 255, 256, 0x1234, 65535] : [0, 1, 72, 255]
        for rate in rates {
            for energy in [nil, 0, 105, 65535] as [Int?] {
                for rr in [[], [812], [812, 799], [0, 65535, 1024]] as [[UInt16]] {
                    let m = HeartRateMeasurement(
                        heartRate: rate, is16Bit: is16Bit, sensorContact: contact, energyExpended: energy, rrIntervalsRaw: rr)
                    let bytes = m.bytes
                    #expect(try HeartRateMeasurement(bytes: bytes) == m, "\(m) -> \(Hex.string(bytes))")
                    // The flags say exactly what is there.
                    #expect((bytes[0] & 0x01 != 0) == is16Bit)
                    #expect((bytes[0] & 0x08 != 0) == (energy != nil))
                    #expect((bytes[0] & 0x10 != 0) == !rr.isEmpty)
                    #expect(bytes.count == 1 + (is16Bit ? 2 : 1) + (energy == nil ? 0 : 2) + 2 * rr.count)
                }
            }
        }
    }

    /// decode -> encode gives the same bytes back, for canonical values.
    @Test func bytesRoundTrip() throws {
        for hex in ["0048", "0648", "1648cc02", "1e4869002c031f03", "1f2c01ffff0004", "012c01", "0400"] {
            let bytes = try #require(Hex.bytes(hex))
            #expect(try HeartRateMeasurement(bytes: bytes).bytes == bytes, "\(hex)")
        }
    }
}

@Suite struct SerialLineTests {
    private func parse(_ text: String) -> SerialHeartRateLine { SerialHeartRateLine(Array(text.utf8)) }

    @Test func theDocumentedExample() throws {
        guard case let .measurement(m) = parse("hr=72 contact=1 energy=105 rr=812,799") else {
            Issue.record("not a measurement")
            return
        }
        #expect(m == HeartRateMeasurement(heartRate: 72, is16Bit: false, sensorContact: .detected, energyExpended: 105, rrIntervalsRaw: [812, 799]))
        // flags: contact supported+detected (0x06), energy (0x08), RR (0x10); uint8 72; 105; 812; 799
        #expect(Hex.string(m.bytes) == "1e4869002c031f03")
    }

    @Test func goodLines() {
        let cases: [(String, HeartRateMeasurement)] = [
            ("hr=60", .init(heartRate: 60)),
            ("hr=255", .init(heartRate: 255)),
            ("hr=256", .init(heartRate: 256, is16Bit: true)),
            ("hr=300 contact=0 rr=200,201,202", .init(heartRate: 300, is16Bit: true, sensorContact: .notDetected, rrIntervalsRaw: [200, 201, 202])),
            ("  rr=1024\tenergy=0 hr=65535 contact=1\r", .init(heartRate: 65535, is16Bit: true, sensorContact: .detected, energyExpended: 0, rrIntervalsRaw: [1024])),
            ("hr=0 energy=65535", .init(heartRate: 0, energyExpended: 65535)),
            // 9 RR intervals with a uint8 rate and no energy: 20 bytes, the most that fits.
            ("hr=70 rr=1,2,3,4,5,6,7,8,9", .init(heartRate: 70, rrIntervalsRaw: [1, 2, 3, 4, 5, 6, 7, 8, 9])),
        ]
        for (text, want) in cases {
            #expect(parse(text) == .measurement(want), "\(text)")
        }
    }

    @Test func blankLines() {
        for text in ["", " ", "\r", " \t \r"] { #expect(parse(text) == .blank) }
    }

    @Test func malformedLines() {
        let bad = [
            "72", "hr", "hr=", "hr=-1", "hr=+5", "hr=65536", "hr=7a", "hr=1e2", "hr=100000", "contact=1",
            "hr=72 hr=73", "hr=72 contact=2", "hr=72 contact=", "hr=72 contact=yes", "hr=72 energy=65536",
            "hr=72 energy=", "hr=72 rr=", "hr=72 rr=1,,2", "hr=72 rr=1,", "hr=72 rr=-5", "hr=72 bpm=5",
            "HR=72", "hr = 72", "hr=72,73", "\u{0}hr=72", "hr=72\u{0}", "hr=٧٢",
            "hr=70 rr=1,2,3,4,5,6,7,8,9,10", "hr=300 energy=1 rr=1,2,3,4,5,6,7,8",
        ]
        for text in bad {
            guard case let .malformed(message) = parse(text) else {
                Issue.record("'\(text)' parsed as \(parse(text))")
                continue
            }
            #expect(!message.isEmpty)
        }
        // Not UTF-8 at all: malformed, not a crash.
        guard case .malformed = SerialHeartRateLine([0xFF, 0xFE, 0x68, 0x72, 0x3D, 0x37]) else {
            Issue.record("binary garbage parsed")
            return
        }
    }

    @Test func splitterCutsChunksAnywhere() {
        let stream = Array("hr=72 contact=1\nhr=73\r\n\nhr=74".utf8)
        for cut in 0...stream.count {
            var splitter = LineSplitter()
            let pieces = splitter.feed(stream[..<cut]) + splitter.feed(stream[cut...])
            #expect(pieces == [.line(Array("hr=72 contact=1".utf8)), .line(Array("hr=73\r".utf8)), .line([])], "cut at \(cut)")
            #expect(splitter.pending == Array("hr=74".utf8))
        }
    }

    @Test func splitterDropsOverlongLines() {
        var splitter = LineSplitter()
        let long = [UInt8](repeating: UInt8(ascii: "x"), count: LineSplitter.maxLineLength + 50)
        var pieces = splitter.feed(long)
        pieces += splitter.feed(Array("more garbage\nhr=60\n".utf8))
        #expect(pieces == [.tooLong(Array(long.prefix(LineSplitter.maxLineLength))), .line(Array("hr=60".utf8))])
        #expect(splitter.reset() == nil)
        _ = splitter.feed(Array("hr=6".utf8))
        #expect(splitter.reset() == Array("hr=6".utf8))
        #expect(splitter.pending.isEmpty)
    }

    @Test func energyOffset() {
        var offset = EnergyOffset()
        func e(_ energy: Int?) -> Int? { offset.apply(HeartRateMeasurement(heartRate: 70, energyExpended: energy)).energyExpended }
        #expect(e(100) == 100)
        offset.reset()
        #expect(e(nil) == nil)
        #expect(e(130) == 30)
        offset.reset()
        #expect(e(131) == 1)
        #expect(e(5) == 5)  // the sensor restarted its count: offset dropped
    }
}

@Suite struct RepublishPlannerTests {
    private let restoredService = GATTServiceDefinition(uuid: "0000180d-0000-1000-8000-00805f9b34fb", characteristics: [])

    @Test func publishesOnceTheAdapterIsOn() {
        var planner = RepublishPlanner(location: .wrist)
        #expect(planner.begin(state: .poweredOff, services: [], advertisement: nil) == [])
        let actions = planner.handle(.stateChanged(.poweredOn))
        #expect(actions == [.publish(planner.service), .advertise(planner.advertisement)])
        #expect(planner.handle(.stateChanged(.poweredOn)) == [])  // under way: not twice
        planner.serviceAdded()
        planner.advertisingStarted()
        #expect(planner.handle(.stateChanged(.poweredOn)) == [])
        // The service: 2a37 notify, 2a38 fixed (the location), 2a39 write.
        let chars = planner.service.characteristics
        #expect(chars.map(\.properties) == [["notify"], ["read"], ["write"]])
        #expect(chars[1].fixedValue == [2])
        #expect(chars[0].value == nil && chars[2].value == nil)
        #expect(planner.advertisement == AdvertisementData(localName: "Vigil HRM Bridge", serviceUUIDs: ["180d"], appearance: 833))
    }

    @Test func aRestoredServiceIsNotPublishedAgain() {
        var planner = RepublishPlanner(location: .chest)
        let advertisement = AdvertisementData(localName: "Vigil HRM Bridge", serviceUUIDs: ["180d"], appearance: 833)
        #expect(planner.begin(state: .poweredOn, services: [restoredService], advertisement: advertisement)
            == [.write(.published(restored: true, localName: "Vigil HRM Bridge"))])
        let restored = PeripheralRestoredState(
            services: [restoredService], advertisement: advertisement,
            subscribed: [SubscribedCharacteristic(service: restoredService.uuid, characteristic: "00002a37-0000-1000-8000-00805f9b34fb")])
        #expect(planner.handle(.willRestoreState(restored)) == [])
        #expect(planner.subscribed)
        #expect(planner.handle(.stateChanged(.poweredOn)) == [])
    }

    @Test func aRestoredServiceWithoutAdvertisementIsAdvertisedOnly() {
        var planner = RepublishPlanner(location: .chest)
        let actions = planner.begin(state: .poweredOn, services: [restoredService], advertisement: nil)
        #expect(actions == [.write(.published(restored: true, localName: nil)), .advertise(planner.advertisement)])
    }

    @Test func measurementsGoOutAndTheLatestIsKeptWhenTheQueueIsFull() {
        var planner = RepublishPlanner(location: .chest)
        #expect(planner.measurement([0x00, 72]) == [.update([0x00, 72])])
        planner.updated([0x00, 72], sent: true)
        #expect(planner.handle(.readyToUpdate) == [])
        #expect(planner.measurement([0x00, 73]) == [.update([0x00, 73])])
        planner.updated([0x00, 73], sent: false)
        #expect(planner.measurement([0x00, 74]) == [.update([0x00, 74])])
        planner.updated([0x00, 74], sent: false)
        #expect(planner.handle(.readyToUpdate) == [.update([0x00, 74])])  // the latest only
        planner.updated([0x00, 74], sent: true)
        #expect(planner.handle(.readyToUpdate) == [])
    }

    @Test func controlPoint() {
        var planner = RepublishPlanner(location: .chest)
        let write = ATTRequest(id: 7, service: "180d", characteristic: "2a39")
        #expect(planner.handle(.writeRequest(write, value: [0x01])) == [.resetEnergy(write)])
        #expect(planner.handle(.writeRequest(write, value: [0x02]))
            == [.write(.controlPoint(raw: [0x02], action: "refused")), .respond(write, value: [], error: .requestNotSupported)])
        let other = ATTRequest(id: 8, service: "180d", characteristic: "2a37")
        #expect(planner.handle(.writeRequest(other, value: [1])) == [.respond(other, value: [], error: .writeNotPermitted)])
        let read = ATTRequest(id: 9, service: "180d", characteristic: "2a38")
        #expect(planner.handle(.readRequest(read)) == [.respond(read, value: [1], error: nil)])
    }

    @Test func subscriptionsAreLogged() {
        var planner = RepublishPlanner(location: .chest)
        #expect(planner.handle(.subscribed(service: "180d", characteristic: "2a37")) == [.write(.subscribers(characteristic: "2a37", subscribed: true))])
        #expect(planner.subscribed)
        #expect(planner.handle(.unsubscribed(service: "180d", characteristic: "2a37")) == [.write(.subscribers(characteristic: "2a37", subscribed: false))])
        #expect(!planner.subscribed)
    }
}

@Suite struct SerialOptionsTests {
    @Test func newOptions() {
        guard case let .run(o) = BridgeOptions.parse(["--serial-protocol", "org.vigil.hrm", "--republish", "--location=2"]) else {
            Issue.record("not parsed")
            return
        }
        #expect(o.serialProtocol == "org.vigil.hrm" && o.republish && o.location == .wrist && o.address == nil)
        guard case let .run(d) = BridgeOptions.parse([]) else { return }
        #expect(!d.republish && d.serialProtocol == nil && d.location == .chest)
        if case .run = BridgeOptions.parse(["--serial-protocol", "p", "--address", "AA:BB:CC:DD:EE:FF"]) { Issue.record("both accepted") }
        if case .run = BridgeOptions.parse(["--location", "256"]) { Issue.record("--location 256 accepted") }
        if case .run = BridgeOptions.parse(["--republish=yes"]) { Issue.record("--republish=yes accepted") }
    }

    @Test func newLinesRoundTrip() throws {
        let records: [OutputLine.Record] = [
            .published(restored: true, localName: "Vigil HRM Bridge"), .published(restored: false, localName: nil),
            .subscribers(characteristic: "2a37", subscribed: true), .controlPoint(raw: [1], action: "resetEnergyExpended"),
            .accessory(event: "opened", source: "serial:VL-HRM-0001", session: 3, detail: "launch"),
            .accessory(event: "closed", source: "serial:/dev/ttyACM0", session: nil, detail: nil),
        ]
        for record in records {
            let line = OutputLine(timeMs: 1_700_000_000_123, monotonicNs: 42, record: record)
            #expect(try OutputLine(json: line.json()) == line, "\(line.json())")
        }
    }
}
