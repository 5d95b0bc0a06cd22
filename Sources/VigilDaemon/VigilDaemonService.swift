import Logging
import ServiceLifecycle
import VigilLifecycle
import VigilSystem

/// vigild as a swift-service-lifecycle `Service`: starts the event loop and the
/// core, runs until graceful shutdown (SIGTERM/SIGINT), then stops cleanly:
/// no app is left frozen, and the socket is removed.
public struct VigilDaemonService: Service {
    public let config: DaemonConfig
    public let socketPath: String
    public let configFile: String?
    public let demo: Bool
    public let logger: Logger

    public init(config: DaemonConfig, socketPath: String, configFile: String?, demo: Bool, logger: Logger) {
        self.config = config
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
        let core = DaemonCore(config: config, socketPath: socketPath, configFile: configFile, loop: loop, logger: logger)
        try await core.start(demo: demo)
        let demoTask = demo ? Task { await DemoDriver.run(core: core) } : nil
        try? await gracefulShutdown()
        demoTask?.cancel()
        await core.shutdown()
    }
}
