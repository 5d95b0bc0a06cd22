import Glibc
import Logging
import VigilSerial
import VigilConfig
import VigilLifecycle
import VigilSystem

/// The port keeper (`FileDescriptorKeeper`): a tty discards its unread input
/// when its last open file closes, and a killed daemon's files close at once.
/// With a copy of every open port in the keeper, a SIGKILL of vigild closes
/// none of them; the next daemon takes them back with the sessions it
/// re-establishes and reads on where the dead one stopped.
extension AccessoriesComponent {
    static func portKeeperPath(_ config: DaemonConfig) -> String { config.stateDirectory + "/port-keeper.sock" }

    /// For `vigilctl status`.
    func portKeeperStatus<S: DaemonServices>(services: isolated S) -> String {
        if portKeeperCommand == nil { return "disabled (--no-port-keeper)" }
        if portKeeper != nil { return "holding \(ports.count) port(s) at \(Self.portKeeperPath(services.config))" }
        if portKeeperFailedAt != nil { return "unavailable: starting one failed (see the log)" }
        return "not running (no port open)"
    }

    /// At start: takes back the ports a keeper holds for an earlier daemon, if
    /// one runs. None is started until a port opens (`keepPort`).
    func connectPortKeeper<S: DaemonServices>(services: isolated S) {
        let logger = services.logger
        let portKeeperPath = Self.portKeeperPath(services.config)
        guard portKeeperCommand != nil else {
            return logger.info("port keeper disabled (--no-port-keeper): a SIGKILL of vigild will lose what its ports received and it had not read")
        }
        guard let keeper = FileDescriptorKeeper.connectIfRunning(path: portKeeperPath) else { return }
        do {
            for (name, fd) in try keeper.list() {
                guard name.hasPrefix("session-"), let session = Int(name.dropFirst("session-".count)) else {
                    Glibc.close(fd)
                    try? keeper.drop(name: name)
                    continue
                }
                keptPorts[session] = fd
            }
        } catch {
            // A keeper that was just ending (its daemon left it nothing) may go
            // with this connection; a new one starts with the first port.
            logger.info("the port keeper at \(portKeeperPath) did not answer (\(error)); a new one starts with the first port")
            return
        }
        if !keptPorts.isEmpty {
            logger.info("port keeper held \(keptPorts.count) port(s) of an earlier daemon")
        }
        portKeeper = keeper
    }

    /// Connects to the keeper, starting one (vigild's own `--fd-keeper`) if none
    /// answers, and hands it every port open now (a keeper that was lost held
    /// them). After a failure, tries again a minute later at the earliest.
    private func startPortKeeper<S: DaemonServices>(services: isolated S) -> FileDescriptorKeeper? {
        let logger = services.logger
        let portKeeperPath = Self.portKeeperPath(services.config)
        guard let command = portKeeperCommand, let executable = command.first else { return nil }
        if let failed = portKeeperFailedAt, services.now - failed < 60_000_000_000 { return nil }
        do {
            let keeper = try FileDescriptorKeeper.connect(path: portKeeperPath) { listener in
                let spawned = try ProcessSpawner.spawn(SpawnRequest(
                    executable: executable, arguments: Array(command.dropFirst()), input: listener, newSession: true,
                    name: "port keeper"))
                // Not watched: it outlives this daemon on purpose.
                if spawned.pidfd >= 0 { Glibc.close(spawned.pidfd) }
                logger.info("port keeper started (pid \(spawned.pid)) at \(portKeeperPath)")
            }
            portKeeper = keeper
            portKeeperFailedAt = nil
            for (session, endpoint) in ports { try keeper.keep(endpoint.port.fd, name: "session-\(session)") }
            return keeper
        } catch {
            logger.warning("cannot start a port keeper (\(error)): a SIGKILL of vigild will lose what its ports received and it had not read")
            portKeeper?.close()
            portKeeper = nil
            portKeeperFailedAt = services.now
            return nil
        }
    }

    /// The keeper's port for `session`, if it holds one for `node` that is still open.
    func keptPort<S: DaemonServices>(for session: Int, node: String, settings: SerialSettings, services: isolated S) -> SerialPort? {
        let logger = services.logger
        guard let fd = keptPorts.removeValue(forKey: session) else { return nil }
        guard let port = SerialPort.adopt(fd: fd, path: node, settings: settings) else {
            logger.info("session \(session): the port an earlier daemon left is no longer \(node); opening it anew")
            return nil
        }
        logger.info("session \(session): took back its open port from the port keeper, unread input intact")
        return port
    }

    func keepPort<S: DaemonServices>(_ fd: Int32, session: Int, services: isolated S) {
        guard let keeper = portKeeper ?? startPortKeeper(services: services) else { return }
        do {
            try keeper.keep(fd, name: "session-\(session)")
        } catch {
            lostPortKeeper(error)
        }
    }

    func releaseKeptPort(_ session: Int) {
        guard let keeper = portKeeper else { return }
        do {
            try keeper.drop(name: "session-\(session)")
        } catch {
            lostPortKeeper(error)
        }
    }

    /// After sessions are re-established: what no session took back is closed.
    func releaseUnclaimedKeptPorts() {
        for (session, fd) in keptPorts {
            Glibc.close(fd)
            releaseKeptPort(session)
        }
        keptPorts = [:]
    }

    /// The daemon stops, leaving its ports with the keeper for the next one.
    func disconnectPortKeeper() {
        portKeeper?.close()
        portKeeper = nil
    }

    /// The daemon stops for good: the keeper closes what it holds and ends.
    func endPortKeeper() {
        portKeeper?.quit()
        portKeeper = nil
    }

    private func lostPortKeeper(_ error: any Error) {
        logger?.warning("port keeper lost (\(error)): a SIGKILL of vigild will lose what its ports received and it had not read")
        portKeeper?.close()
        portKeeper = nil
    }
}
