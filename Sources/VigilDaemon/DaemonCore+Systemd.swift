import Logging
import VigilProtocol
import VigilSystem

/// What the daemon tells systemd, when it runs as a `Type=notify` service:
/// `$NOTIFY_SOCKET` and `$WATCHDOG_USEC` taken at start (`SystemdEnvironment`).
/// Without them every call here returns at once, and no timer exists.
struct SystemdLink: Sendable {
    var notifier: SystemdNotifier?
    var watchdogInterval: Duration?

    init(notifier: SystemdNotifier? = nil, watchdogInterval: Duration? = nil) {
        self.notifier = notifier
        self.watchdogInterval = watchdogInterval
    }
}

extension DaemonCore {
    /// READY=1 with the first status line, once `start` has returned: the
    /// socket listens and the state is loaded (a client connecting after this
    /// is accepted by the loop). Starts the watchdog keep-alive if asked for.
    func systemdReady() {
        guard let notifier = systemd.notifier else { return }
        let status = systemdStatusLine()
        systemdStatus = status
        notify([.ready, .status(status)])
        if let interval = systemd.watchdogInterval {
            let logger = self.logger
            watchdog = notifier.keepAlive(on: loop, interval: interval) { error in
                logger.error("systemd watchdog: cannot send WATCHDOG=1: \(error)")
            }
            logger.info("systemd watchdog: WATCHDOG=1 every \(interval / 2) from the event loop")
        }
    }

    /// SIGHUP's reload, bracketed as sd_notify(3) asks: RELOADING=1, then READY=1.
    func systemdReloading() {
        notify([.reloading(.now())])
    }

    func systemdReloaded() {
        guard systemd.notifier != nil else { return }
        systemdStatus = systemdStatusLine()
        notify([.ready, .status(systemdStatus!)])
    }

    func systemdStopping() {
        notify([.stopping, .status("stopping")])
    }

    /// Sends a new STATUS= line when what it says changed: apps' states,
    /// sessions or Bluetooth's state; called where those change, never on a timer.
    func updateSystemdStatus() {
        // Before READY=1 the first line goes with it; after STOPPING=1 none.
        guard systemd.notifier != nil, let last = systemdStatus, !stopping else { return }
        let status = systemdStatusLine()
        guard status != last else { return }
        systemdStatus = status
        notify([.status(status)])
    }

    /// e.g. "3 apps (1 running, 1 suspended), 2 sessions, Bluetooth: poweredOn".
    func systemdStatusLine() -> String {
        var running = 0, suspended = 0
        for app in engine.apps.values {
            switch app.state {
            case .notRunning: break
            case .suspended: suspended += 1
            default: running += 1
            }
        }
        let sessions = component(StreamSessions.self)?.count ?? 0
        let bluetooth = component(BluetoothComponent.self)?.stateName ?? "off"
        return "\(engine.apps.count) apps (\(running) running, \(suspended) suspended), \(sessions) sessions, Bluetooth: \(bluetooth)"
    }

    private func notify(_ notifications: [SystemdNotification]) {
        guard let notifier = systemd.notifier else { return }
        do {
            try notifier.send(notifications)
        } catch {
            logger.error("cannot notify systemd at \(notifier.socketName): \(error)")
        }
    }
}

