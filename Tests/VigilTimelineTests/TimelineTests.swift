import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif
import Testing
import VigilProtocol
@testable import VigilTimeline

@Suite("Timeline: the decision log as lanes, an SVG and a trace")
struct TimelineTests {
    static let logger = "org.example.logger"
    static let bridge = "org.example.bridge"

    /// A scripted minute: the logger launched, sent to the background,
    /// suspended, woken twice for session data (the second time it holds a
    /// task); the bridge launched into the background for a notification.
    static let decisions: [DecisionRecord] = [
        DecisionRecord(time: 1000, app: logger, action: "launch", reason: "launched by the user", state: .inactive),
        DecisionRecord(time: 1001, app: logger, action: "enterForeground", reason: "connected", state: .active),
        DecisionRecord(time: 1010, app: logger, action: "enterBackground", reason: "moved to the background", state: .background),
        DecisionRecord(time: 1015, app: logger, action: "suspend", reason: "grace period of 5 s over", state: .suspended),
        DecisionRecord(time: 1020, app: logger, action: "wake", reason: "woken for 'session.data' (seq 1)", state: .background),
        DecisionRecord(time: 1020.25, app: logger, action: "suspend", reason: "finished processing early", state: .suspended),
        DecisionRecord(time: 1030, app: logger, action: "wake", reason: "woken for 'session.data' (seq 2)", state: .background),
        DecisionRecord(time: 1031, app: logger, action: "extend", reason: "background task 1 'upload' begun", state: .background),
        DecisionRecord(time: 1040, app: logger, action: "suspend", reason: "last task ended", state: .suspended),
        DecisionRecord(time: 1035, app: bridge, action: "relaunch", reason: "launched into the background for 'ble.notification' (seq 7)", state: .background),
        DecisionRecord(time: 1036, app: bridge, action: "suspend", reason: "finished processing early", state: .suspended),
    ]

    @Test func lanesFollowTheDecisions() {
        let timeline = Timeline(decisions: Self.decisions, end: 1060)
        #expect(timeline.lanes.map(\.app) == [Self.logger, Self.bridge], "in order of first appearance")
        let logger = timeline.lanes[0]
        #expect(logger.bands.map(\.state) == [.inactive, .active, .background, .suspended, .background, .suspended, .background, .suspended])
        #expect(logger.bands.first?.start == 1000 && logger.bands.last?.end == 1060)
        #expect(logger.marks.map(\.kind) == [nil, "session.data", "session.data"])
        #expect(logger.windows.map { $0.end - $0.start } == [0.25, 10])
        #expect(logger.tasks == [Timeline.Span(start: 1031, end: 1040, label: "background task")])
        let bridge = timeline.lanes[1]
        #expect(bridge.marks.map(\.action) == ["relaunch"] && bridge.marks.first?.kind == "ble.notification")
        #expect(bridge.windows.map { $0.end - $0.start } == [1])
    }

    @Test func aPeriodClipsBandsAndDropsMarksOutsideIt() {
        let timeline = Timeline(decisions: Self.decisions, start: 1025, end: 1034)
        let logger = timeline.lanes[0]
        #expect(logger.bands.map(\.state) == [.suspended, .background])
        #expect(logger.bands.first?.start == 1025 && logger.bands.last?.end == 1034)
        #expect(logger.marks.count == 1)
        #expect(timeline.lanes.map(\.app) == [Self.logger], "the bridge has nothing before 1034")
    }

    @Test func theSVGHasALanePerAppWithItsBandsMarksAndBars() throws {
        let svg = TimelineSVG(Timeline(decisions: Self.decisions, end: 1060), wakeBudget: 10).text
        let document = try XMLDocument(xmlString: svg)  // well-formed, or this throws
        func count(_ xpath: String) throws -> Int { try document.nodes(forXPath: xpath).count }
        #expect(try count("//*[local-name()='g'][@class='lane']") == 2)
        #expect(try count("//*[local-name()='g'][@data-app='\(Self.logger)']/*[local-name()='rect'][starts-with(@class,'band suspended')]") == 3)
        #expect(try count("//*[local-name()='g'][@data-app='\(Self.logger)']/*[local-name()='g'][@class='mark'][@data-kind='session.data']") == 2)
        #expect(try count("//*[local-name()='rect'][@class='window']") == 3)
        #expect(try count("//*[local-name()='rect'][@class='task']") == 1)
        #expect(svg.contains("ran 0.250 s of 10 s"))
    }

    @Test func reasonsAreEscapedAndControlCharactersReplaced() throws {
        let odd = DecisionRecord(time: 5, app: "org.example.odd", action: "wake", reason: "woken for '<&\"\u{1}>' x", state: .background)
        let svg = TimelineSVG(Timeline(decisions: [odd], end: 6)).text
        _ = try XMLDocument(xmlString: svg)
        #expect(svg.contains("&lt;&amp;&quot;\u{FFFD}&gt;"))
    }

    @Test func anEmptyLogStillDrawsAPicture() throws {
        let svg = TimelineSVG(Timeline(decisions: [], start: 0, end: 60)).text
        _ = try XMLDocument(xmlString: svg)
        #expect(svg.contains("no decisions in this period"))
    }

    static let devices: [DeviceRecord] = [
        DeviceRecord(time: 1005, kind: "accessory", device: "Sensor VGL123", change: "connected", detail: "connection 1 at /dev/ttyACM0"),
        DeviceRecord(time: 1025, kind: "accessory", device: "Sensor VGL123", change: "disconnected", detail: "connection 1 at /dev/ttyACM0"),
        DeviceRecord(time: 1028, kind: "accessory", device: "Sensor VGL123", change: "connected", detail: "connection 2 at /dev/ttyACM0"),
        DeviceRecord(time: 1033, kind: "bluetooth", device: "AA:BB:CC:DD:EE:FF", change: "disconnected", detail: "link lost"),
    ]

    @Test func devicesGetLanesOfTheirOwn() throws {
        let timeline = Timeline(decisions: Self.decisions, devices: Self.devices, end: 1060)
        #expect(timeline.devices.map(\.device) == ["Sensor VGL123", "AA:BB:CC:DD:EE:FF"])
        let sensor = timeline.devices[0]
        #expect(sensor.connected.map { [$0.start, $0.end] } == [[1005, 1025], [1028, 1060]])
        #expect(sensor.changes.map(\.change) == ["connected", "disconnected", "connected"])
        // First seen going away: connected since before the period.
        #expect(timeline.devices[1].connected.map { [$0.start, $0.end] } == [[1000, 1033]])

        let svg = TimelineSVG(timeline).text
        let document = try XMLDocument(xmlString: svg)
        #expect(try document.nodes(forXPath: "//*[local-name()='g'][@class='device']").count == 2)
        #expect(try document.nodes(forXPath: "//*[local-name()='polygon'][@class='change disconnected']").count == 2)

        let data = try TimelineTrace(timeline).data()
        let events = try #require((try JSONSerialization.jsonObject(with: data) as? [String: Any])?["traceEvents"] as? [[String: Any]])
        #expect(events.filter { $0["cat"] as? String == "device" && $0["ph"] as? String == "X" }.count == 3)
    }

    @Test func recordsWrittenAsLinesReadBack() throws {
        let decision = DecisionRecord(time: 1_764_118_129.125, app: "org.example.a", action: "wake", reason: "woken for 'x' \"q\"\n", state: .background)
        let device = DeviceRecord(time: 12.5, kind: "accessory", device: "S\u{1}", change: "connected", detail: "at /dev/x")
        #expect(try JSONDecoder().decode(DecisionRecord.self, from: Data(decision.jsonLine)) == decision)
        #expect(try JSONDecoder().decode(DeviceRecord.self, from: Data(device.jsonLine)) == device)
        #expect(decision.jsonLine.last == UInt8(ascii: "\n") && decision.jsonLine.filter { $0 == UInt8(ascii: "\n") }.count == 1)
    }

    @Test func theTraceHasAThreadPerAppAndItsEvents() throws {
        let data = try TimelineTrace(Timeline(decisions: Self.decisions, end: 1060)).data()
        let object = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        let events = try #require(object["traceEvents"] as? [[String: Any]])
        let threads = events.filter { $0["name"] as? String == "thread_name" }.compactMap { ($0["args"] as? [String: Any])?["name"] as? String }
        #expect(threads == [Self.logger, Self.bridge])
        let states = events.filter { $0["cat"] as? String == "state" }
        #expect(states.count == 10)
        #expect(states.allSatisfy { $0["ph"] as? String == "X" && ($0["dur"] as? Int ?? -1) >= 0 })
        let wakes = events.filter { $0["cat"] as? String == "wake" }
        #expect(wakes.count == 4)
        #expect(wakes.contains { $0["name"] as? String == "wake: session.data" && $0["ts"] as? Int == 1_020_000_000 })
    }

    /// The picture and the trace byte for byte as recorded before the module
    /// left Foundation (issue 32: `String(format:)` and `JSONSerialization`
    /// replaced by code of its own), with text that needs escaping and times
    /// that need rounding. `VIGIL_GOLDEN_RECORD=1` rewrites the files.
    @Test func outputMatchesTheGoldenFiles() throws {
        let odd: [DecisionRecord] = [
            DecisionRecord(time: 1000.04999, app: "org.example.a/b", action: "launch", reason: "by \"you\" & <me>", state: .inactive),
            DecisionRecord(time: 1003.95, app: "org.example.a/b", action: "enterBackground", reason: "tab\tnew\nline \u{1}é✓", state: .background),
            DecisionRecord(time: 1004.123456789, app: "org.example.a/b", action: "wake", reason: "woken for 'x/y' (seq 3)\t\r\u{8}\u{c}\u{1f}\u{0}\n é✓", state: .background),
            DecisionRecord(time: 1007.0000005, app: "org.example.a/b", action: "suspend", reason: "done", state: .suspended),
        ]
        let devices = Self.devices + [
            DeviceRecord(time: 1044.5, kind: "bluetooth", device: "C0:FF:EE", change: "connected", detail: "a \\ b \"c\" /d"),
        ]
        let cases: [(String, Timeline, Double?)] = [
            ("minute", Timeline(decisions: Self.decisions, devices: devices, end: 1060), 10),
            ("window", Timeline(decisions: Self.decisions, start: 1025, end: 1034), nil),
            ("odd", Timeline(decisions: odd, end: 1012.75), 0.5),
            ("empty", Timeline(decisions: [], start: 0, end: 60), nil),
        ]
        let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Golden")
        let record = ProcessInfo.processInfo.environment["VIGIL_GOLDEN_RECORD"] == "1"
        for (name, timeline, budget) in cases {
            let outputs = [("svg", Data(TimelineSVG(timeline, wakeBudget: budget).text.utf8)), ("json", try TimelineTrace(timeline).data())]
            for (ext, data) in outputs {
                let file = folder.appendingPathComponent("\(name).\(ext)")
                if record {
                    try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
                    try data.write(to: file)
                }
                let golden = try Data(contentsOf: file)
                #expect(data == golden, "\(name).\(ext) differs from \(file.path)")
            }
        }
    }
}
