import VigilProtocol

/// What the daemon decided, laid out per app over time: the model behind
/// `vigilctl timeline`'s picture (`TimelineSVG`) and its Perfetto trace
/// (`TimelineTrace`). Built from the decision log alone, since every state
/// change is a decision that names the state after it.
public struct Timeline: Sendable, Equatable {
    /// One app's row.
    public struct Lane: Sendable, Equatable {
        public var app: String
        /// The app's state over time, consecutive equal states merged.
        public var bands: [Band] = []
        /// Wakes and launches, with the event kind that caused them.
        public var marks: [Mark] = []
        /// Time spent running after each wake or background launch, until it
        /// was suspended, terminated or came to the foreground.
        public var windows: [Span] = []
        /// Background tasks: from the first `extend` of a stretch to its end.
        public var tasks: [Span] = []
    }

    public struct Band: Sendable, Equatable {
        public var start: Double
        public var end: Double
        public var state: AppState
    }

    public struct Mark: Sendable, Equatable {
        public var time: Double
        /// `wake`, `relaunch` or `launch`.
        public var action: String
        /// The event kind named in the decision's reason, if any.
        public var kind: String?
        public var reason: String
    }

    public struct Span: Sendable, Equatable {
        public var start: Double
        public var end: Double
        public var label: String
    }

    /// One device's row: when it was connected, and each change.
    public struct DeviceLane: Sendable, Equatable {
        /// `accessory` or `bluetooth`.
        public var kind: String
        public var device: String
        /// Connected periods.
        public var connected: [Span] = []
        public var changes: [DeviceRecord] = []
    }

    /// The period shown, seconds since the Unix epoch.
    public var start: Double
    public var end: Double
    public var lanes: [Lane]
    public var devices: [DeviceLane]

    /// Lays out `decisions` (any order) between `start` (default: the first
    /// decision) and `end` (default: the last; `vigilctl` passes now).
    public init(decisions: [DecisionRecord], devices: [DeviceRecord] = [], start: Double? = nil, end: Double? = nil) {
        let sorted = decisions.enumerated().sorted { ($0.element.time, $0.offset) < ($1.element.time, $1.offset) }.map(\.element)
        let changes = devices.enumerated().sorted { ($0.element.time, $0.offset) < ($1.element.time, $1.offset) }.map(\.element)
        let times = sorted.map(\.time) + changes.map(\.time)
        let from = start ?? times.min() ?? 0
        let to = max(end ?? times.max() ?? from, from)
        self.start = from
        self.end = to
        var order: [String] = []
        var byApp: [String: [DecisionRecord]] = [:]
        for decision in sorted {
            if byApp[decision.app] == nil { order.append(decision.app) }
            byApp[decision.app, default: []].append(decision)
        }
        lanes = order.map { Self.lane($0, byApp[$0]!, from: from, to: to) }
            .filter { !$0.bands.isEmpty || !$0.marks.isEmpty }
        self.devices = Self.deviceLanes(changes, from: from, to: to)
    }

    /// One lane per device, in the order they first appear; a device first
    /// seen disconnecting was connected from before the period.
    private static func deviceLanes(_ changes: [DeviceRecord], from: Double, to: Double) -> [DeviceLane] {
        var order: [String] = []
        var lanes: [String: DeviceLane] = [:]
        var since: [String: Double] = [:]
        for change in changes where change.time <= to {
            let key = change.kind + "/" + change.device
            if lanes[key] == nil {
                order.append(key)
                lanes[key] = DeviceLane(kind: change.kind, device: change.device)
                if change.change == "disconnected" { since[key] = from }
            }
            if change.change == "connected" {
                if since[key] == nil { since[key] = change.time }
            } else if let start = since.removeValue(forKey: key) {
                appendClipped(&lanes[key]!.connected, Span(start: start, end: change.time, label: change.device), from, to)
            }
            if change.time >= from { lanes[key]!.changes.append(change) }
        }
        for (key, start) in since { appendClipped(&lanes[key]!.connected, Span(start: start, end: to, label: lanes[key]!.device), from, to) }
        return order.compactMap { lanes[$0] }.filter { !$0.connected.isEmpty || !$0.changes.isEmpty }
    }

    static let wakeActions: Set<String> = ["wake", "relaunch", "launch"]
    /// Decisions that end a processing window.
    static let windowEnds: Set<String> = ["suspend", "terminate", "exit", "crash", "enterForeground", "forceQuit"]

    private static func lane(_ app: String, _ decisions: [DecisionRecord], from: Double, to: Double) -> Lane {
        var lane = Lane(app: app)
        var openWindow: Mark?
        var openTask: Double?
        for (index, decision) in decisions.enumerated() {
            let next = index + 1 < decisions.count ? decisions[index + 1].time : to
            let bandStart = max(decision.time, from), bandEnd = min(next, to)
            if bandEnd > bandStart {
                if let last = lane.bands.last, last.state == decision.state, last.end == bandStart {
                    lane.bands[lane.bands.count - 1].end = bandEnd
                } else {
                    lane.bands.append(Band(start: bandStart, end: bandEnd, state: decision.state))
                }
            }
            let visible = decision.time >= from && decision.time <= to
            if wakeActions.contains(decision.action) {
                let mark = Mark(time: decision.time, action: decision.action, kind: eventKind(in: decision.reason), reason: decision.reason)
                if visible { lane.marks.append(mark) }
                // A foreground launch opens no window; a launch into the background does.
                openWindow = decision.state == .background ? mark : nil
            }
            if decision.action == "extend", openTask == nil { openTask = decision.time }
            if windowEnds.contains(decision.action) || decision.state.isForeground {
                if let window = openWindow, decision.time > window.time {
                    appendClipped(&lane.windows, Span(start: window.time, end: decision.time, label: window.kind ?? window.action), from, to)
                }
                openWindow = nil
                if let task = openTask {
                    appendClipped(&lane.tasks, Span(start: task, end: decision.time, label: "background task"), from, to)
                    openTask = nil
                }
            }
        }
        if let window = openWindow { appendClipped(&lane.windows, Span(start: window.time, end: to, label: window.kind ?? window.action), from, to) }
        if let task = openTask { appendClipped(&lane.tasks, Span(start: task, end: to, label: "background task"), from, to) }
        return lane
    }

    private static func appendClipped(_ spans: inout [Span], _ span: Span, _ from: Double, _ to: Double) {
        let start = max(span.start, from), end = min(span.end, to)
        if end >= start, span.end >= from, span.start <= to { spans.append(Span(start: start, end: end, label: span.label)) }
    }

    /// The first quoted word of a reason: "woken for 'session.data' (seq 4)" → session.data.
    static func eventKind(in reason: String) -> String? {
        guard let open = reason.firstIndex(of: "'") else { return nil }
        let rest = reason[reason.index(after: open)...]
        guard let close = rest.firstIndex(of: "'") else { return nil }
        let kind = rest[..<close]
        return kind.isEmpty ? nil : String(kind)
    }
}
