import VigilKit

/// `vigilctl apps`: one line per app.
struct AppTable {
    let apps: [AppInfo]

    init(_ apps: [AppInfo]) { self.apps = apps }

    var text: String {
        var table = Table(headers: ["ID", "STATE", "PID", "WAKES", "BG-TIME", "TASKS", "QUEUED", "LAST DECISION"])
        for app in apps {
            table.rows.append([
                app.id,
                app.state.rawValue + (app.forceQuit ? " (force-quit)" : ""),
                app.pid.map(String.init) ?? "-",
                String(app.wakes),
                formatSeconds(app.backgroundTimeUsed),
                app.tasks.isEmpty ? "-" : app.tasks.map(\.name).joined(separator: ","),
                queued(app),
                [app.lastDecision, app.lastReason].compactMap(\.self).joined(separator: ": "),
            ])
        }
        return table.text
    }

    /// Waiting and unacknowledged events, plus drops, which must never go unseen.
    private func queued(_ app: AppInfo) -> String {
        var text = String(app.queuedEvents)
        if app.unacknowledgedEvents > 0 { text += "+\(app.unacknowledgedEvents)unacked" }
        if app.droppedEvents > 0 { text += " (\(app.droppedEvents) dropped)" }
        return text
    }
}

/// `vigilctl log`: the decisions with their reasons.
struct DecisionTable {
    let decisions: [DecisionRecord]

    init(_ decisions: [DecisionRecord]) { self.decisions = decisions }

    var text: String {
        var table = Table(headers: ["TIME", "APP", "ACTION", "STATE", "REASON"])
        for decision in decisions {
            table.rows.append([
                formatTime(decision.time), decision.app, decision.action, decision.state.rawValue, decision.reason,
            ])
        }
        return table.text
    }
}

/// `vigilctl status`: the daemon, and above all how it suspends apps and why.
struct StatusReport {
    let status: DaemonStatus

    init(_ status: DaemonStatus) { self.status = status }

    var text: String {
        var table = Table(headers: ["daemon", "\(status.daemon) (pid \(status.pid), protocol \(status.protocolVersion))"])
        table.rows = [
            ["uptime", formatSeconds(status.uptime)],
            ["socket", status.socket],
            ["suspension", "\(mechanism): \(status.suspensionDetail)"],
            ["cgroup root", status.cgroupRoot ?? "-"],
            ["on stop", status.onStop.map { $0 == "leave" ? "leave apps (and ports) for the next vigild" : "terminate apps" } ?? "-"],
            ["port keeper", status.portKeeper ?? "-"],
            ["apps", String(status.apps)],
            ["timings", status.timings.sorted { $0.key < $1.key }.map { "\($0.key) \(timing($0.key, $0.value))" }
                .joined(separator: ", ")],
        ]
        var text = table.text
        if !status.manifestProblems.isEmpty {
            text += "\nmanifest problems:\n" + status.manifestProblems.map { "  \($0)" }.joined(separator: "\n")
        }
        return text
    }

    /// Timings are seconds, except counts such as `relaunch-limit`.
    private func timing(_ name: String, _ value: Double) -> String {
        name.hasSuffix("-limit") && !name.contains("time") ? String(Int(value)) : formatSeconds(value)
    }

    private var mechanism: String {
        switch status.suspension {
        case .cgroupFreezer: "cgroup freezer"
        case .signals: "signal fallback (SIGSTOP/SIGCONT)"
        }
    }
}
