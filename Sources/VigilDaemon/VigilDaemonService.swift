import Logging
import ServiceLifecycle
import VigilLifecycle
import VigilSystem

/// vigild as a swift-service-lifecycle `Service`: starts the event loop and the
/// core, runs until graceful shutdown (SIGTERM/SIGINT), then stops cleanly:
/// no app is left frozen or stopped (they are left for adoption or ended, as
/// `onStop` says), and the socket is removed.
public struct VigilDaemonService: Service {
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

    public init(
        config: DaemonConfig, socketPath: String, configFile: String?, demo: Bool, onStop: StopPolicy? = nil,
        portKeeper: [String]? = nil, logger: Logger
    ) {
        self.config = config
        self.portKeeper = portKeeper
        self.onStop = onStop ?? config.onStop
        self.socketPath = socketPath
        self.configFile = configFile
        self.demo = demo
        self.logger = logger
    }

    public func run() async throws {
        let loop = try EventLoop(name: "vigild-loop")
        loop.start()
        defer {
            loop.stop()
        }
        let core = DaemonCore(
            config: config, socketPath: socketPath, configFile: configFile, onStop: onStop, portKeeper: portKeeper, loop: loop,
            logger: logger)
        try await core.start(demo: demo)
        let demoTask = demo ? Task { await DemoDriver.run(core: core) } : nil
        try? await gracefulShutdown()
        demoTask?.cancel()
        await core.shutdown()
    }
}
