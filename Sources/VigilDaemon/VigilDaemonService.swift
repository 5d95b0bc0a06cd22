import Glibc
import Logging
import VigilConfig
import VigilLifecycle
import VigilSystem

/// vigild: starts the event loop and the core, runs until SIGTERM or SIGINT,
/// then stops cleanly: no app is left frozen or stopped (they are left for
/// adoption or ended, as `onStop` says), and the socket is removed. SIGHUP
/// reloads the manifests, as `vigilctl reload` does.
/// Under systemd it says when it is ready, reloading and stopping, keeps the
/// watchdog fed from the loop, and serves a socket systemd passed
/// (`DaemonCore+Systemd.swift`, docs/systemd.md).
///
/// The whole daemon runs on one thread, the event loop's, and never on Swift's
/// global concurrent executor or any libdispatch queue: those start
/// libdispatch's worker pool, whose manager thread then re-arms a 1 s timer
/// for the life of the process, and an idle daemon must take no wake-ups.
/// So signals arrive through a signalfd watched by the loop (not a dispatch
/// signal source), every task is started with the loop as its executor
/// (`EventLoop.task`), and the caller's thread just waits for the loop to end.
///
/// That is also why this is not a swift-service-lifecycle `Service` run by a
/// `ServiceGroup` any more: the group listens for signals with dispatch signal
/// sources on a dispatch queue and runs services in task groups on the global
/// executor, which is the 1 Hz wake-up measured in docs/performance.md. With
/// one service and three signals, the thin integration here is all vigild needs.
public struct VigilDaemonService: Sendable {
    public let config: DaemonConfig
    public let socketPath: String
    public let configFile: String?
    public let demo: Bool
    /// What the stop does with the apps: the config's `on-stop`, or the command line's.
    public let onStop: StopPolicy
    public let logger: Logger
    /// The command that starts a port keeper (`FileDescriptorKeeper`), vigild's
    /// own `--fd-keeper`; nil runs without one (a SIGKILL then loses what a
    /// port had received and the daemon had not read yet).
    public let portKeeper: [String]?
    /// What systemd passed: a notification socket, a watchdog, a listening socket.
    public let systemd: SystemdEnvironment

    /// The signals `run` handles: graceful stop, and reload.
    public static let stopSignals: [Int32] = [SIGTERM, SIGINT]
    public static let reloadSignal: Int32 = SIGHUP

    public init(
        config: DaemonConfig, socketPath: String, configFile: String?, demo: Bool, onStop: StopPolicy? = nil,
        portKeeper: [String]? = nil, logger: Logger, systemd: SystemdEnvironment = SystemdEnvironment()
    ) {
        self.config = config
        self.systemd = systemd
        self.portKeeper = portKeeper
        self.onStop = onStop ?? config.onStop
        self.socketPath = socketPath
        self.configFile = configFile
        self.demo = demo
        self.logger = logger
    }

    /// Runs the daemon on the calling thread until it has stopped; throws if
    /// it could not start. Call it from the main thread before any other
    /// thread exists: it blocks SIGTERM, SIGINT and SIGHUP there, so that
    /// every thread started later (the loop's) leaves them to the signalfd.
    public func run() throws {
        let signals = try SignalFD(signals: Self.stopSignals + [Self.reloadSignal])
        defer { signals.close() }
        let link = try SystemdLink(
            notifier: systemd.notifySocket.map { try SystemdNotifier(socket: $0) }, watchdogInterval: systemd.watchdogInterval)
        let passed = try passedListener()
        let loop = try EventLoop(name: "vigild-loop")
        let core = DaemonCore(
            config: config, socketPath: passed?.path ?? socketPath, configFile: configFile, onStop: onStop, portKeeper: portKeeper,
            loop: loop, logger: logger, systemd: link, passedListener: passed)
        let failure = Locked<(any Error)?>(nil)
        let demo = self.demo
        loop.start()
        loop.execute {
            core.assumeIsolated { core in
                do {
                    try core.start(demo: demo)
                    try core.watchSignals(signals)
                    core.systemd.ready(services: core)
                } catch {
                    // As before: a daemon that could not start (e.g. its socket
                    // is another daemon's) must not stop that one's apps.
                    failure.withLock { $0 = error }
                    loop.stop()
                    return
                }
                if demo { core.component(DemoComponent.self)?.run(services: core) }
            }
        }
        loop.waitUntilStopped()
        if let error = failure.withLock({ $0 }) { throw error }
    }

    /// The listening socket systemd passed (socket activation, `vigild.socket`),
    /// if any: exactly one, a Unix stream socket that listens. vigild then
    /// serves it instead of binding `socketPath`, and leaves its file alone.
    private func passedListener() throws -> UnixListener? {
        guard let passed = systemd.listenFDs.first else { return nil }
        guard systemd.listenFDs.count == 1 else {
            let names = systemd.listenFDs.map { "\($0.fd) (\($0.name))" }.joined(separator: ", ")
            throw DaemonError("systemd passed \(systemd.listenFDs.count) sockets (\(names)); vigild serves exactly one: give its socket unit one ListenStream=")
        }
        let listener = try UnixListener.adopt(fd: passed.fd)
        if listener.path != socketPath {
            logger.notice("serving the socket systemd passed, \(listener.path), instead of \(socketPath)")
        }
        return listener
    }
}

extension DaemonCore {
    /// Handles the signals on the loop: a stop signal starts the graceful
    /// stop (once: a second one while it runs is only logged), SIGHUP
    /// reloads the manifests.
    func watchSignals(_ signals: SignalFD) throws {
        _ = try loop.watch(signals.fd, for: .readable) { [unowned self] _ in
            for signal in signals.read() {
                self.assumeIsolated { $0.handleSignal(signal) }
            }
        }
    }

    private func handleSignal(_ signal: Int32) {
        let name = String(cString: strsignal(signal))
        if signal == VigilDaemonService.reloadSignal {
            logger.notice("\(name): reloading the manifests")
            systemd.reloading(services: self)
            reloadManifests()
            systemd.reloaded(services: self)
            return
        }
        guard !stopping else {
            logger.notice("\(name): already stopping")
            return
        }
        systemd.stopping(services: self)
        stopping = true
        logger.notice("\(name): stopping")
        let loop = self.loop
        loop.task {
            await self.shutdown()
            loop.stop()
        }
    }
}
