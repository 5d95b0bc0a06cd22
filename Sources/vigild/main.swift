import ArgumentParser
import FoundationEssentials
import Glibc
import Logging
import VigilDaemon
import VigilConfig
import VigilLifecycle
import VigilProtocol
import VigilSystem

// A synchronous entry point: an async main would park the main thread in
// libdispatch and run on the global executor, whose worker pool wakes the
// process every second. VigilDaemonService.run says why vigild stays off it.
@main
struct Vigild: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "vigild",
        abstract: "Keeps accessory and Bluetooth apps' sessions open while they are suspended, and wakes them.",
        discussion: """
            SIGTERM or SIGINT stops vigild gracefully (see --on-stop); SIGHUP reloads the manifests, as `vigilctl reload` does. \
            Exit status 64: the command line or the configuration is wrong (the message names the file, the key and the range; \
            the configuration's keys are in /usr/share/doc/vigil/configuration.md, the manifests' in vigil-manifest(5)).
            """,
        version: VigilVersion.current)

    @Flag(help: "Run as the system daemon (socket under /run/vigil, config /etc/vigil/vigild.toml).")
    var system = false

    @Option(help: "Socket path (also VIGIL_SOCKET); its folder must exist. Default: /run/vigil/vigild.sock, or $XDG_RUNTIME_DIR/vigil/vigild.sock per user (the vigil folder is created).")
    var socket: String?

    @Option(help: "Configuration file. Default: /etc/vigil/vigild.toml (system) or $XDG_CONFIG_HOME/vigil/vigild.toml.")
    var config: String?

    @Flag(help: "Built-in demo: run the sample app and wake it every 15 s, for machines with no hardware attached. Implies --on-stop terminate.")
    var demo = false

    @Option(help: "What stopping vigild (SIGTERM, SIGINT) does with its apps: leave (thawed and left running for the next vigild to adopt) or terminate (willTerminate, the exit grace, then killed). Default: the config's on-stop, else leave.")
    var onStop: StopPolicy?

    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel: Logger.Level = .info

    @Flag(inversion: .prefixedNo, help: "Keep open ports in a port keeper process, so that a SIGKILL or crash of vigild does not close them (a serial port discards what it received and vigild had not read at its last close).")
    var portKeeper = true

    /// Started by vigild itself: the port keeper (`FileDescriptorKeeper`), on the socket it gets as stdin.
    @Flag(help: .hidden)
    var fdKeeper = false

    func run() throws {
        if fdKeeper { FileDescriptorKeeper.serve() }
        // First, on the only thread: it unsets what systemd passed, so apps do not inherit it.
        let systemd: SystemdEnvironment
        do {
            systemd = try SystemdEnvironment.take()
        } catch {
            throw ValidationError("\(error)")
        }
        let environment = ProcessInfo.processInfo.environment
        DaemonLogging.bootstrap(level: logLevel)
        let logger = Logger(label: "vigild")
        // One daemon holds fds for many apps (sockets, pidfds, cgroup files,
        // ports, session logs): past the usual 1024, not the apps themselves.
        do {
            let openFiles = try ResourceLimits.raiseOpenFileLimit()
            logger.debug("open-file limit \(openFiles)")
        } catch {
            logger.warning("cannot raise the open-file limit: \(error)")
        }

        let defaults = DaemonConfig(system: system)
        let configFile = config ?? (system
            ? "/etc/vigil/vigild.toml"
            : (environment["XDG_CONFIG_HOME"] ?? (environment["HOME"] ?? "/tmp") + "/.config") + "/vigil/vigild.toml")
        let daemonConfig: DaemonConfig
        do {
            daemonConfig = try DaemonConfig.load(file: configFile, defaults: defaults, required: config != nil)
        } catch {
            throw ValidationError("invalid configuration: \(error)")
        }
        let namedSocket = socket ?? environment["VIGIL_SOCKET"] ?? daemonConfig.socket
        guard let socketPath = namedSocket ?? defaultSocket(environment) else {
            throw ValidationError("no socket path: pass --socket, set VIGIL_SOCKET or XDG_RUNTIME_DIR, or use --system")
        }
        // Only the default folder is created: a typo in a path someone named
        // would otherwise leave the daemon listening where no client looks.
        if namedSocket != nil, systemd.listenFDs.isEmpty { try Self.requireParentDirectory(of: socketPath) }
        let service = VigilDaemonService(
            config: daemonConfig, socketPath: socketPath, configFile: configFile, demo: demo,
            // The demo's apps are its own: a stopped demo leaves nothing running.
            onStop: onStop ?? (demo ? .terminate : nil),
            portKeeper: portKeeper
                ? [(try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? "/proc/self/exe", "--fd-keeper"]
                : nil,
            logger: logger, systemd: systemd)
        try service.run()
    }

    private static func requireParentDirectory(of path: String) throws {
        let parent = parentDirectory(of: path)
        guard !parent.isEmpty else { return }
        var status = stat()
        guard stat(parent, &status) == 0 else {
            throw ValidationError("the socket's folder \(parent) does not exist: create it first (vigild creates only its default folder)")
        }
        guard (status.st_mode & S_IFMT) == S_IFDIR else {
            throw ValidationError("the socket's folder \(parent) is not a folder")
        }
    }

    private func defaultSocket(_ environment: [String: String]) -> String? {
        if system { return "/run/vigil/vigild.sock" }
        if let runtime = environment["XDG_RUNTIME_DIR"] { return runtime + "/vigil/vigild.sock" }
        return getuid() == 0 ? "/run/vigil/vigild.sock" : nil
    }
}

extension Logger.Level: @retroactive ExpressibleByArgument {}
extension StopPolicy: ExpressibleByArgument {}
