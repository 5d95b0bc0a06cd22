import FoundationEssentials
import Glibc
import VigilProtocol

/// `Timeline` as an SVG picture: one lane per app with its states as coloured
/// bands, wakes as marks labelled with their event kinds, each processing
/// window as a bar under the band (its length is the budget used), and
/// background tasks as spans; a time axis in UTC. Elements carry classes
/// (`lane`, `band <state>`, `mark`, `window`, `task`) so tests and style
/// sheets can find them, and `<title>`s so a viewer shows the reasons.
public struct TimelineSVG {
    public let timeline: Timeline
    public var width = 1200.0
    /// The processing window a wake gets (`wake-budget`), to say how much of it was used.
    public var wakeBudget: Double?

    public init(_ timeline: Timeline, width: Double = 1200, wakeBudget: Double? = nil) {
        self.timeline = timeline
        self.width = width
        self.wakeBudget = wakeBudget
    }

    static let labelWidth = 230.0
    static let laneHeight = 46.0
    static let top = 40.0
    static let colours: [AppState: String] = [
        .active: "#43a047", .inactive: "#a5d6a7", .background: "#fb8c00", .suspended: "#90a4ae", .notRunning: "#eceff1",
    ]

    public var text: String {
        let short = timeline.end - timeline.start < 60
        let rows = timeline.lanes.count + timeline.devices.count
        let height = Self.top + Double(max(rows, 1)) * Self.laneHeight + 50
        var out = """
            <svg xmlns="http://www.w3.org/2000/svg" width="\(Int(width))" height="\(Int(height))" \
            viewBox="0 0 \(Int(width)) \(Int(height))" font-family="sans-serif" font-size="12">
            <rect width="100%" height="100%" fill="white"/>
            <text x="8" y="18" font-size="14" font-weight="bold">vigild decisions, \(Self.clock(timeline.start, fraction: short)) to \(Self.clock(timeline.end, fraction: short)) UTC</text>

            """
        out += axis(height: height)
        for (index, lane) in timeline.lanes.enumerated() {
            out += self.lane(lane, y: Self.top + Double(index) * Self.laneHeight)
        }
        for (index, device) in timeline.devices.enumerated() {
            out += self.device(device, y: Self.top + Double(timeline.lanes.count + index) * Self.laneHeight)
        }
        if rows == 0 {
            out += "<text x=\"\(Self.labelWidth)\" y=\"\(Self.top + 20)\">no decisions in this period</text>\n"
        }
        out += legend(y: height - 18)
        return out + "</svg>\n"
    }

    private var plotWidth: Double { width - Self.labelWidth - 20 }

    private func x(_ time: Double) -> Double {
        let span = max(timeline.end - timeline.start, 1e-9)
        return Self.labelWidth + (time - timeline.start) / span * plotWidth
    }

    private func lane(_ lane: Timeline.Lane, y: Double) -> String {
        var out = "<g class=\"lane\" data-app=\"\(Self.escape(lane.app))\">\n"
        out += "<text x=\"8\" y=\"\(f(y + 16))\">\(Self.escape(lane.app))</text>\n"
        for band in lane.bands {
            out += "<rect class=\"band \(band.state.rawValue)\" x=\"\(f(x(band.start)))\" y=\"\(f(y + 4))\" "
                + "width=\"\(f(max(x(band.end) - x(band.start), 0.5)))\" height=\"18\" fill=\"\(Self.colours[band.state] ?? "#ccc")\">"
                + "<title>\(band.state.rawValue) \(Self.clock(band.start))–\(Self.clock(band.end))</title></rect>\n"
        }
        for window in lane.windows {
            let used = window.end - window.start
            let budget = wakeBudget.map { cFormat(" of %.0f s", $0) } ?? ""
            out += "<rect class=\"window\" x=\"\(f(x(window.start)))\" y=\"\(f(y + 24))\" width=\"\(f(max(x(window.end) - x(window.start), 1)))\" "
                + "height=\"5\" fill=\"#e53935\"><title>\(Self.escape(window.label)): ran \(cFormat("%.3f", used)) s\(budget)</title></rect>\n"
        }
        for task in lane.tasks {
            out += "<rect class=\"task\" x=\"\(f(x(task.start)))\" y=\"\(f(y + 31))\" width=\"\(f(max(x(task.end) - x(task.start), 1)))\" "
                + "height=\"4\" fill=\"#5e35b1\"><title>\(Self.escape(task.label)) \(cFormat("%.1f", task.end - task.start)) s</title></rect>\n"
        }
        for mark in lane.marks {
            let mx = x(mark.time)
            out += "<g class=\"mark\" data-action=\"\(mark.action)\" data-kind=\"\(Self.escape(mark.kind ?? ""))\">"
                + "<line x1=\"\(f(mx))\" y1=\"\(f(y + 1))\" x2=\"\(f(mx))\" y2=\"\(f(y + 38))\" stroke=\"black\" stroke-width=\"1.2\"/>"
                + "<title>\(Self.escape(mark.action)) \(Self.clock(mark.time)): \(Self.escape(mark.reason))</title></g>\n"
        }
        // Kinds as text only where there is room: one label per 60 px.
        var lastLabel = -Double.infinity
        for mark in lane.marks where x(mark.time) - lastLabel >= 60 {
            lastLabel = x(mark.time)
            out += "<text class=\"kind\" x=\"\(f(lastLabel + 2))\" y=\"\(f(y + 44))\" font-size=\"9\">\(Self.escape(mark.kind ?? mark.action))</text>\n"
        }
        return out + "</g>\n"
    }

    private func device(_ lane: Timeline.DeviceLane, y: Double) -> String {
        var out = "<g class=\"device\" data-kind=\"\(Self.escape(lane.kind))\" data-device=\"\(Self.escape(lane.device))\">\n"
        out += "<text x=\"8\" y=\"\(f(y + 16))\" font-style=\"italic\">\(Self.escape(lane.kind)): \(Self.escape(lane.device))</text>\n"
        out += "<rect x=\"\(f(Self.labelWidth))\" y=\"\(f(y + 10))\" width=\"\(f(plotWidth))\" height=\"2\" fill=\"#cfd8dc\"/>\n"
        for span in lane.connected {
            out += "<rect class=\"connected\" x=\"\(f(x(span.start)))\" y=\"\(f(y + 6))\" width=\"\(f(max(x(span.end) - x(span.start), 1)))\" "
                + "height=\"10\" fill=\"#26a69a\"><title>connected \(Self.clock(span.start))–\(Self.clock(span.end))</title></rect>\n"
        }
        for change in lane.changes {
            let cx = x(change.time)
            let up = change.change == "connected"
            let points = up ? "\(f(cx - 5)),\(f(y + 30)) \(f(cx + 5)),\(f(y + 30)) \(f(cx)),\(f(y + 21))"
                : "\(f(cx - 5)),\(f(y + 21)) \(f(cx + 5)),\(f(y + 21)) \(f(cx)),\(f(y + 30))"
            out += "<polygon class=\"change \(Self.escape(change.change))\" points=\"\(points)\" fill=\"\(up ? "#2e7d32" : "#c62828")\">"
                + "<title>\(Self.escape(change.change)) \(Self.clock(change.time)): \(Self.escape(change.detail))</title></polygon>\n"
        }
        return out + "</g>\n"
    }

    private func axis(height: Double) -> String {
        let span = max(timeline.end - timeline.start, 1e-9)
        let steps: [Double] = [0.1, 0.5, 1, 5, 10, 30, 60, 300, 600, 1800, 3600, 10800, 21600, 43200, 86400]
        let step = steps.first { span / $0 <= 12 } ?? 86400
        var out = "<g class=\"axis\">\n"
        var tick = (timeline.start / step).rounded(.up) * step
        while tick <= timeline.end {
            let tx = x(tick)
            out += "<line x1=\"\(f(tx))\" y1=\"\(f(Self.top - 6))\" x2=\"\(f(tx))\" y2=\"\(f(height - 40))\" stroke=\"#ddd\"/>"
            // A label only where it fits inside the picture.
            if tx + 62 <= width {
                out += "<text x=\"\(f(tx + 2))\" y=\"\(f(Self.top - 8))\" font-size=\"10\">\(Self.clock(tick, fraction: step < 1))</text>"
            }
            out += "\n"
            tick += step
        }
        return out + "</g>\n"
    }

    private func legend(y: Double) -> String {
        var out = "<g class=\"legend\">"
        var lx = 8.0
        for state in [AppState.active, .inactive, .background, .suspended, .notRunning] {
            out += "<rect x=\"\(f(lx))\" y=\"\(f(y - 10))\" width=\"12\" height=\"12\" fill=\"\(Self.colours[state]!)\" stroke=\"#999\"/>"
                + "<text x=\"\(f(lx + 16))\" y=\"\(f(y))\">\(state.rawValue)</text>"
            lx += 110
        }
        out += "<rect x=\"\(f(lx))\" y=\"\(f(y - 6))\" width=\"20\" height=\"5\" fill=\"#e53935\"/><text x=\"\(f(lx + 24))\" y=\"\(f(y))\">ran after a wake</text>"
        lx += 140
        out += "<rect x=\"\(f(lx))\" y=\"\(f(y - 6))\" width=\"20\" height=\"4\" fill=\"#5e35b1\"/><text x=\"\(f(lx + 24))\" y=\"\(f(y))\">background task</text>"
        lx += 140
        out += "<line x1=\"\(f(lx + 6))\" y1=\"\(f(y - 12))\" x2=\"\(f(lx + 6))\" y2=\"\(f(y + 2))\" stroke=\"black\"/><text x=\"\(f(lx + 12))\" y=\"\(f(y))\">wake / launch</text>"
        lx += 110
        out += "<rect x=\"\(f(lx))\" y=\"\(f(y - 9))\" width=\"20\" height=\"10\" fill=\"#26a69a\"/><text x=\"\(f(lx + 24))\" y=\"\(f(y))\">device connected</text>"
        return out + "</g>\n"
    }

    private func f(_ value: Double) -> String { cFormat("%.1f", value) }

    /// HH:MM:SS (UTC) of an epoch time, with tenths if `fraction`.
    static func clock(_ time: Double, fraction: Bool = false) -> String {
        let tenths = Int((time.truncatingRemainder(dividingBy: 86400) * 10).rounded()) % 864_000
        let seconds = fraction ? tenths / 10 : Int(time.truncatingRemainder(dividingBy: 86400))
        let text = cFormat("%02d:%02d:%02d", seconds / 3600, seconds / 60 % 60, seconds % 60)
        return fraction ? text + ".\(tenths % 10)" : text
    }

    static func escape(_ text: String) -> String {
        var out = ""
        for character in text {
            switch character {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            // XML 1.0 has no control characters but tab and newlines.
            case _ where character.unicodeScalars.contains(where: { $0.value < 0x20 && $0 != "\t" && $0 != "\n" }):
                out += "\u{FFFD}"
            default: out.append(character)
            }
        }
        return out
    }
}
