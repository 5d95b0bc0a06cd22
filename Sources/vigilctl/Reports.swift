import VigilKit

/// `vigilctl apps`: one line per app.
struct AppTable {
    let apps: [AppInfo]

    init(_ apps: [AppInfo]) { self.apps = apps }

    var text: String {
        var table = Table(headers: ["ID", "STATE", "PID", "WAKES", "BG-TIME", "TASKS", "QUEUED", "REFRESH", "LAST DECISION"])
        for app in apps {
            table.rows.append([
                app.id,
                app.state.words + (app.forceQuit ? " (force-quit)" : ""),
                app.pid.map(String.init) ?? "-",
                String(app.wakes),
                formatSeconds(app.backgroundTimeUsed),
                app.tasks.isEmpty ? "-" : app.tasks.map(\.name).joined(separator: ","),
                queued(app),
                refresh(app),
                [app.lastDecision.map(spacedWords), app.lastReason].compactMap(\.self).joined(separator: ": "),
            ])
        }
        return table.text
    }

    /// Background refresh: when the next may come, and every how long.
    private func refresh(_ app: AppInfo) -> String {
        guard let next = app.nextRefresh, let interval = app.refreshInterval else { return "-" }
        return "in \(formatSeconds(next)) /\(formatSeconds(interval))"
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
    /// One decision on one line, for `--follow` (no column widths to wait for).
    static func line(_ decision: DecisionRecord) -> String {
        "\(formatTime(decision.time))  \(decision.app)  \(decision.action)  \(decision.state.words)  \(decision.reason)"
    }

    let decisions: [DecisionRecord]

    init(_ decisions: [DecisionRecord]) { self.decisions = decisions }

    var text: String {
        var table = Table(headers: ["TIME", "APP", "ACTION", "STATE", "REASON"])
        for decision in decisions {
            table.rows.append([
                formatTime(decision.time), decision.app, spacedWords(decision.action), decision.state.words, decision.reason,
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
        if let bluetooth = status.bluetooth { table.rows.append(["bluetooth", "\(bluetooth.condition.words): \(bluetooth.detail)"]) }
        if let udev = status.udev { table.rows.append(["udev", "\(udev.condition.words): \(udev.detail)"]) }
        if let mqtt = status.mqtt {
            let link = mqtt.connected ? "connected to \(mqtt.broker)" : "not connected to \(mqtt.broker) (\(mqtt.detail))"
            table.rows.append([
                "mqtt",
                "\(link); outbox \(mqtt.outbox) (\(mqtt.outboxBytes) B), held \(mqtt.held); since start: received \(mqtt.received), "
                    + "published \(mqtt.published), refused \(mqtt.refused), unrouted \(mqtt.unrouted)",
            ])
        }
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

extension BluetoothHealth.Condition {
    var words: String {
        switch self {
        case .disabled: "disabled"
        case .noBus: "no system bus"
        case .noBluetoothd: "bluetoothd not running"
        case .starting: "starting"
        case .noAdapter: "no adapter"
        case .poweredOff: "powered off"
        case .poweredOn: "powered on"
        case .unrecognized: "unrecognized"
        }
    }
}

extension UdevHealth.Condition {
    var words: String {
        switch self {
        case .ok: "ok"
        case .noUdevd: "systemd-udevd not running"
        case .unavailable: "unavailable"
        case .unrecognized: "unrecognized"
        }
    }
}
