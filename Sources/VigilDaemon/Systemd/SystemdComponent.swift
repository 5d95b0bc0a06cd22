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

/// What the daemon tells systemd: READY=1, RELOADING=1, STOPPING=1, the
/// watchdog's keep-alive and a one-line STATUS= that each component adds
/// to (`addSummary`). The core tells it when the daemon is ready, reloads
/// or stops, and when something the line shows changed.
final class SystemdComponent: DaemonComponent {
    let name = "systemd"
    private let link: SystemdLink
    /// The last STATUS= line sent to systemd.
    private var status: String?
    private var watchdog: SystemdWatchdog?

    init(link: SystemdLink) { self.link = link }

    /// READY=1 with the first status line, once `start` has returned: the
    /// socket listens and the state is loaded (a client connecting after this
    /// is accepted by the loop). Starts the watchdog keep-alive if asked for.
    func ready<S: DaemonServices>(services: isolated S) {
        guard let notifier = link.notifier else { return }
        let line = statusLine(services: services)
        status = line
        notify([.ready, .status(line)], logger: services.logger)
        if let interval = link.watchdogInterval {
            let logger = services.logger
            watchdog = notifier.keepAlive(on: services.loop, interval: interval) { error in
                logger.error("systemd watchdog: cannot send WATCHDOG=1: \(error)")
            }
            logger.info("systemd watchdog: WATCHDOG=1 every \(interval / 2) from the event loop")
        }
    }

    /// SIGHUP's reload, bracketed as sd_notify(3) asks: RELOADING=1, then READY=1.
    func reloading<S: DaemonServices>(services: isolated S) {
        notify([.reloading(.now())], logger: services.logger)
    }

    func reloaded<S: DaemonServices>(services: isolated S) {
        guard link.notifier != nil else { return }
        let line = statusLine(services: services)
        status = line
        notify([.ready, .status(line)], logger: services.logger)
    }

    func stopping<S: DaemonServices>(services: isolated S) {
        notify([.stopping, .status("stopping")], logger: services.logger)
    }

    /// Sends a new STATUS= line when what it says changed: apps' states,
    /// sessions or Bluetooth's state; called where those change, never on a timer.
    func update<S: DaemonServices>(services: isolated S) {
        // Before READY=1 the first line goes with it; after STOPPING=1 none.
        guard link.notifier != nil, let last = status, !services.stopping else { return }
        let line = statusLine(services: services)
        guard line != last else { return }
        status = line
        notify([.status(line)], logger: services.logger)
    }

    /// e.g. "3 apps (1 running, 1 suspended), 2 sessions, Bluetooth: poweredOn".
    func statusLine<S: DaemonServices>(services: isolated S) -> String {
        var running = 0, suspended = 0
        let apps = services.engine.apps
        for app in apps.values {
            switch app.state {
            case .notRunning: break
            case .suspended: suspended += 1
            default: running += 1
            }
        }
        var parts = ["\(apps.count) apps (\(running) running, \(suspended) suspended)"]
        for component in services.components((any DaemonComponent).self) {
            component.addSummary(to: &parts, services: services)
        }
        return parts.joined(separator: ", ")
    }

    private func notify(_ notifications: [SystemdNotification], logger: Logger) {
        guard let notifier = link.notifier else { return }
        do {
            try notifier.send(notifications)
        } catch {
            logger.error("cannot notify systemd at \(notifier.socketName): \(error)")
        }
    }
}
