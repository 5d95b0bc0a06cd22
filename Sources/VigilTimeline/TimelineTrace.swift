import Foundation

/// `Timeline` in the Chrome/Perfetto trace-event format (JSON), so it opens
/// in ui.perfetto.dev or chrome://tracing: one thread per app, its states as
/// complete events (`ph: X`, category `state`), processing windows and
/// background tasks as complete events of their own categories, and wakes as
/// instant events (`ph: i`). Times are microseconds since the Unix epoch.
public struct TimelineTrace {
    public let timeline: Timeline

    public init(_ timeline: Timeline) { self.timeline = timeline }

    public func data() throws -> Data {
        var events: [[String: Any]] = [["name": "process_name", "ph": "M", "pid": 1, "args": ["name": "vigild"]]]
        for (index, lane) in timeline.lanes.enumerated() {
            let tid = index + 1
            events.append(["name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": ["name": lane.app]])
            events.append(["name": "thread_sort_index", "ph": "M", "pid": 1, "tid": tid, "args": ["sort_index": tid]])
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
                events.append([
                    "name": "\(mark.action): \(mark.kind ?? "-")", "cat": "wake", "ph": "i", "s": "t", "pid": 1, "tid": tid,
                    "ts": micro(mark.time), "args": ["reason": mark.reason],
                ])
            }
        }
        for (index, lane) in timeline.devices.enumerated() {
            let tid = timeline.lanes.count + index + 1
            events.append(["name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": ["name": "\(lane.kind): \(lane.device)"]])
            events.append(["name": "thread_sort_index", "ph": "M", "pid": 1, "tid": tid, "args": ["sort_index": tid]])
            for span in lane.connected {
                events.append(complete("connected", "device", span.start, span.end, tid))
            }
            for change in lane.changes {
                events.append([
                    "name": change.change, "cat": "device", "ph": "i", "s": "t", "pid": 1, "tid": tid,
                    "ts": micro(change.time), "args": ["detail": change.detail],
                ])
            }
        }
        return try JSONSerialization.data(withJSONObject: ["traceEvents": events, "displayTimeUnit": "ms"], options: [.sortedKeys])
    }

    private func complete(_ name: String, _ category: String, _ start: Double, _ end: Double, _ tid: Int) -> [String: Any] {
        ["name": name, "cat": category, "ph": "X", "pid": 1, "tid": tid, "ts": micro(start), "dur": max(micro(end) - micro(start), 0)]
    }

    private func micro(_ time: Double) -> Int64 { Int64((time * 1e6).rounded()) }
}
