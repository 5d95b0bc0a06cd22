import Foundation
import Testing

@testable import HeartRateBridge

private let address = "C0:DE:00:00:00:01"

/// The line's JSON as a dictionary (what a Python test reading the file sees).
private func object(_ line: OutputLine) throws -> [String: Any] {
    try #require(JSONSerialization.jsonObject(with: Data(line.json().utf8)) as? [String: Any])
}

@Suite struct OutputLineTests {
    let measurement = HeartRateMeasurement(
        heartRate: 300, is16Bit: true, sensorContact: .detected, energyExpended: 100, rrIntervalsRaw: [853, 854, 1024])

    @Test func aMeasurementLine() throws {
        let raw = measurement.bytes
        let line = OutputLine(
            timeMs: 1_700_000_000_123, monotonicNs: 987_654_321_000,
            record: .measurement(address: address, measurement: measurement, raw: raw))
        let json = line.json()
        #expect(!json.contains("\n"))
        #expect(json.hasPrefix(#"{"address":"C0:DE:00:00:00:01","energyExpended":100,"heartRate":300,"#))
        let o = try object(line)
        #expect(o["kind"] as? String == "measurement")
        #expect(o["time"] as? String == "2023-11-14T22:13:20.123Z")
        #expect((o["monotonicNs"] as? NSNumber)?.uint64Value == 987_654_321_000)
        #expect(o["address"] as? String == address)
        #expect(o["heartRate"] as? Int == 300)
        #expect(o["is16Bit"] as? Bool == true)
        #expect(o["sensorContact"] as? String == "detected")
        #expect(o["energyExpended"] as? Int == 100)
        #expect(o["rrIntervalsRaw"] as? [Int] == [853, 854, 1024])
        #expect(o["rrIntervals"] as? [Double] == [853.0 / 1024, 854.0 / 1024, 1.0])
        #expect(o["raw"] as? String == "1f2c016400550356030004")
        #expect(Set(o.keys) == [
            "kind", "time", "monotonicNs", "address", "heartRate", "is16Bit", "sensorContact", "energyExpended",
            "rrIntervals", "rrIntervalsRaw", "raw",
        ])
        #expect(try OutputLine(json: json) == line)
    }

    @Test func absentFieldsAreNull() throws {
        let m = HeartRateMeasurement(heartRate: 61)
        let line = OutputLine(timeMs: 0, monotonicNs: 1, record: .measurement(address: address, measurement: m, raw: m.bytes))
        let json = line.json()
        #expect(json.contains(#""energyExpended":null"#))
        #expect(json.contains(#""rrIntervals":[]"#) && json.contains(#""rrIntervalsRaw":[]"#))
        #expect(json.contains(#""sensorContact":"notSupported""#) && json.contains(#""is16Bit":false"#))
        #expect(json.contains(#""time":"1970-01-01T00:00:00.000Z""#) && json.contains(#""raw":"003d""#))
        #expect(try OutputLine(json: json) == line)
    }

    /// Every kind survives encode + parse.
    @Test(arguments: [
        OutputLine.Record.started(
            pid: 4242, app: "org.vigil.example.hrm-bridge", launchReason: "event", state: "background",
            restoreIdentifier: "org.vigil.example.hrm-bridge", address: nil),
        .started(pid: 1, app: "a.b", launchReason: "user", state: "active", restoreIdentifier: "x", address: address),
        .lifecycle(notification: "didEnterBackground", state: "background"),
        .restored(peripherals: [address, "AA:BB:CC:DD:EE:FF"], address: address, connected: true, subscribed: true, scanServices: nil),
        .restored(peripherals: [], address: nil, connected: false, subscribed: false, scanServices: [HeartRateService.service]),
        .bluetoothState("poweredOn"),
        .scanning(services: [HeartRateService.service]),
        .discovered(address: address, name: "Vigil HRM", rssi: -40),
        .discovered(address: address, name: nil, rssi: nil),
        .connecting(address: address),
        .connected(address: address),
        .subscribed(address: address, service: HeartRateService.service, characteristic: HeartRateService.measurement),
        .bodySensorLocation(address: address, location: .chest, raw: [1]),
        .bodySensorLocation(address: address, location: .reserved(9), raw: [9]),
        .measurement(address: address, measurement: HeartRateMeasurement(heartRate: 72, sensorContact: .notDetected), raw: [0x04, 72]),
        .disconnected(address: address, reason: "connection terminated by the remote device (power off)", willReconnect: true),
        .error(operation: "decode heart rate measurement", message: "truncated \"value\"", address: address, raw: [0x01, 0x2C]),
        .error(operation: "connect to vigild", message: "no socket", address: nil, raw: nil),
    ])
    func roundTrip(_ record: OutputLine.Record) throws {
        let line = OutputLine(timeMs: 1_763_717_223_512, monotonicNs: 12_345, record: record)
        let parsed = try OutputLine(json: line.json())
        #expect(parsed == line)
        #expect(try object(line)["kind"] as? String == record.kind)
    }

    @Test func bodySensorLocationLine() throws {
        let o = try object(OutputLine(timeMs: 0, monotonicNs: 0, record: .bodySensorLocation(address: address, location: .earLobe, raw: [5])))
        #expect(o["kind"] as? String == "bodySensorLocation")
        #expect(o["location"] as? String == "earLobe" && o["value"] as? Int == 5 && o["raw"] as? String == "05")
    }

    @Test func stampedNow() {
        let before = Int64(Date().timeIntervalSince1970 * 1000)
        let line = OutputLine(.connected(address: address))
        let after = Int64(Date().timeIntervalSince1970 * 1000)
        #expect(line.timeMs >= before - 1 && line.timeMs <= after + 1)
        #expect(line.monotonicNs > 0)
    }

    @Test func badLinesAreRejected() {
        #expect(throws: (any Error).self) { try OutputLine(json: #"{"kind":"nope","time":"1970-01-01T00:00:00.000Z","monotonicNs":0}"#) }
        #expect(throws: (any Error).self) { try OutputLine(json: #"{"kind":"connected","time":"yesterday","monotonicNs":0,"address":"x"}"#) }
        #expect(throws: (any Error).self) {
            try OutputLine(json: #"{"kind":"bodySensorLocation","time":"1970-01-01T00:00:00.000Z","monotonicNs":0,"address":"x","location":"chest","value":1,"raw":"zz"}"#)
        }
    }
}

@Suite struct TimestampAndHexTests {
    @Test(arguments: [
        (Int64(0), "1970-01-01T00:00:00.000Z"),
        (1_700_000_000_000, "2023-11-14T22:13:20.000Z"),
        (1_700_000_000_007, "2023-11-14T22:13:20.007Z"),
        (951_782_400_999, "2000-02-29T00:00:00.999Z"),
        (-1, "1969-12-31T23:59:59.999Z"),
    ])
    func iso8601WithMilliseconds(_ ms: Int64, _ text: String) {
        #expect(Timestamp.iso8601(ms: ms) == text)
        #expect(Timestamp.parseISO8601(text) == ms)
    }

    @Test func otherFormsAreNotParsed() {
        for text in ["2023-11-14T22:13:20Z", "2023-11-14 22:13:20.000Z", "2023-13-14T22:13:20.000Z", "2023-11-14T22:13:20.000+01:00", ""] {
            #expect(Timestamp.parseISO8601(text) == nil, "\(text)")
        }
    }

    @Test func hex() {
        #expect(Hex.string([]) == "")
        #expect(Hex.string([0x00, 0x0F, 0xA0, 0xFF]) == "000fa0ff")
        #expect(Hex.bytes("000fa0ff") == [0x00, 0x0F, 0xA0, 0xFF])
        #expect(Hex.bytes("000FA0FF") == [0x00, 0x0F, 0xA0, 0xFF])
        #expect(Hex.bytes("abc") == nil && Hex.bytes("zz") == nil)
    }
}

@Suite struct OutputFileTests {
    @Test func linesAreAppendedAndVisibleAtOnceAcrossProcesses() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("hrm-bridge-\(UUID().uuidString).jsonl").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let first = OutputLine(timeMs: 1, monotonicNs: 1, record: .connected(address: address))
        let second = OutputLine(timeMs: 2, monotonicNs: 2, record: .disconnected(address: address, reason: "gone", willReconnect: true))
        do {
            let output = try Output(path: path)
            #expect(output.write(first))
            // Read while the writer is still open: no buffering.
            #expect(try String(contentsOfFile: path, encoding: .utf8) == first.json() + "\n")
        }
        // A relaunched process appends to the same file.
        let again = try Output(path: path)
        #expect(again.write(second))
        let lines = try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n").map(String.init)
        #expect(try lines.map(OutputLine.init(json:)) == [first, second])
    }

    @Test func anUnwritableOutputIsAnError() {
        #expect(throws: OutputError.self) { try Output(path: "/nonexistent-folder/out.jsonl") }
    }
}

@Suite struct BridgeOptionsTests {
    @Test func defaults() {
        #expect(BridgeOptions.parse([]) == .run(BridgeOptions()))
        #expect(BridgeOptions().restoreIdentifier == "org.vigil.example.hrm-bridge")
    }

    @Test func everyOption() {
        var want = BridgeOptions()
        want.address = "C0:DE:00:00:00:01"
        want.output = "/tmp/hr.jsonl"
        want.restoreIdentifier = "lab"
        #expect(BridgeOptions.parse(["--address", "c0:de:00:00:00:01", "--output", "/tmp/hr.jsonl", "--restore-id", "lab"]) == .run(want))
        #expect(BridgeOptions.parse(["--address=C0-DE-00-00-00-01", "--output=/tmp/hr.jsonl", "--restore-id=lab"]) == .run(want))
        want.mqttTopic = "fleet/gw17/heart-rate"
        #expect(BridgeOptions.parse(["--address", "c0:de:00:00:00:01", "--output", "/tmp/hr.jsonl", "--restore-id", "lab",
                                     "--mqtt", "fleet/gw17/heart-rate"]) == .run(want))
    }

    @Test func mistakes() {
        #expect(BridgeOptions.parse(["--help"]) == .help)
        #expect(BridgeOptions.parse(["--address"]) == .failure("--address needs a value"))
        #expect(BridgeOptions.parse(["--output="]) == .failure("--output needs a value"))
        #expect(BridgeOptions.parse(["--adress", "x"]) == .failure("unknown argument '--adress'"))
        #expect(BridgeOptions.parse(["--address", "C0:DE:00:00:00"])
            == .failure("--address 'C0:DE:00:00:00' is not a Bluetooth address (AA:BB:CC:DD:EE:FF)"))
        #expect(BridgeOptions.parse(["--mqtt", "fleet/+/hr"])
            == .failure("--mqtt 'fleet/+/hr' is a topic filter: name one topic, without + or #"))
        #expect(BridgeOptions.parse(["--mqtt"]) == .failure("--mqtt needs a value"))
    }
}
