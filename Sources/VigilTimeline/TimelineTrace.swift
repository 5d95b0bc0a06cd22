import FoundationEssentials

/// `Timeline` in the Chrome/Perfetto trace-event format (JSON), so it opens
/// in ui.perfetto.dev or chrome://tracing: one thread per app, its states as
/// complete events (`ph: X`, category `state`), processing windows and
/// background tasks as complete events of their own categories, and wakes as
/// instant events (`ph: i`). Times are microseconds since the Unix epoch.
public struct TimelineTrace {
    public let timeline: Timeline

    public init(_ timeline: Timeline) { self.timeline = timeline }

    /// Compact JSON, keys sorted, `/` escaped: the bytes Foundation's
    /// `JSONSerialization` wrote before (issue 32), written here without it.
    public func data() throws -> Data {
        var events: [TraceValue] = [.object(["name": "process_name", "ph": "M", "pid": 1, "args": .object(["name": "vigild"])])]
        for (index, lane) in timeline.lanes.enumerated() {
            let tid = Int64(index + 1)
            events.append(.object(["name": "thread_name", "ph": "M", "pid": 1, "tid": .int(tid), "args": .object(["name": .string(lane.app)])]))
            events.append(.object(["name": "thread_sort_index", "ph": "M", "pid": 1, "tid": .int(tid), "args": .object(["sort_index": .int(tid)])]))
            for band in lane.bands {
                events.append(complete(band.state.rawValue, "state", band.start, band.end, tid))
            }
            for window in lane.windows {
                events.append(complete("ran for \(window.label)", "window", window.start, window.end, tid))
            }
            for task in lane.tasks {
                events.append(complete(task.label, "task", task.start, task.end, tid))
            }
            for mark in lane.marks {
                events.append(.object([
                    "name": .string("\(mark.action): \(mark.kind ?? "-")"), "cat": "wake", "ph": "i", "s": "t", "pid": 1, "tid": .int(tid),
                    "ts": .int(micro(mark.time)), "args": .object(["reason": .string(mark.reason)]),
                ]))
            }
        }
        for (index, lane) in timeline.devices.enumerated() {
            let tid = Int64(timeline.lanes.count + index + 1)
            events.append(.object(["name": "thread_name", "ph": "M", "pid": 1, "tid": .int(tid), "args": .object(["name": .string("\(lane.kind): \(lane.device)")])]))
            events.append(.object(["name": "thread_sort_index", "ph": "M", "pid": 1, "tid": .int(tid), "args": .object(["sort_index": .int(tid)])]))
            for span in lane.connected {
                events.append(complete("connected", "device", span.start, span.end, tid))
            }
            for change in lane.changes {
                events.append(.object([
                    "name": .string(change.change), "cat": "device", "ph": "i", "s": "t", "pid": 1, "tid": .int(tid),
                    "ts": .int(micro(change.time)), "args": .object(["detail": .string(change.detail)]),
                ]))
            }
        }
        var text = ""
        TraceValue.object(["traceEvents": .array(events), "displayTimeUnit": "ms"]).write(to: &text)
        return Data(text.utf8)
    }

    private func complete(_ name: String, _ category: String, _ start: Double, _ end: Double, _ tid: Int64) -> TraceValue {
        .object([
            "name": .string(name), "cat": .string(category), "ph": "X", "pid": 1, "tid": .int(tid), "ts": .int(micro(start)),
            "dur": .int(max(micro(end) - micro(start), 0)),
        ])
    }

    private func micro(_ time: Double) -> Int64 { Int64((time * 1e6).rounded()) }
}

/// The JSON a trace is made of: strings, integers, arrays and objects.
enum TraceValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral {
    case string(String)
    case int(Int64)
    case array([TraceValue])
    case object([String: TraceValue])

    init(stringLiteral value: String) { self = .string(value) }
    init(integerLiteral value: Int64) { self = .int(value) }

    /// Compact, an object's keys in order (the trace's keys are lower-case
    /// ASCII, where this order is JSONSerialization's `.sortedKeys` too).
    func write(to out: inout String) {
        switch self {
        case let .string(text): Self.write(text, to: &out)
        case let .int(number): out += String(number)
        case let .array(values):
            out += "["
            for (index, value) in values.enumerated() {
                if index > 0 { out += "," }
                value.write(to: &out)
            }
            out += "]"
        case let .object(members):
            out += "{"
            for (index, member) in members.sorted(by: { $0.key < $1.key }).enumerated() {
                if index > 0 { out += "," }
                Self.write(member.key, to: &out)
                out += ":"
                member.value.write(to: &out)
            }
            out += "}"
        }
    }

    /// A JSON string as JSONSerialization escaped it: `/` as `\/`, the
    /// short escapes where JSON has them, other control characters `\u00xx`.
    private static func write(_ text: String, to out: inout String) {
        out += "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "/": out += "\\/"
            case "\u{8}": out += "\\b"
            case "\u{c}": out += "\\f"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case "\u{0}"..."\u{1f}":
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        out += "\""
    }
}
