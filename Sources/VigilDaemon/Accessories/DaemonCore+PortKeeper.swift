import Glibc
import VigilSerial
import VigilSystem

/// The port keeper (`FileDescriptorKeeper`): a tty discards its unread input
/// when its last open file closes, and a killed daemon's files close at once.
/// With a copy of every open port in the keeper, a SIGKILL of vigild closes
/// none of them; the next daemon takes them back with the sessions it
/// re-establishes and reads on where the dead one stopped.
extension DaemonCore {
    var portKeeperPath: String { config.stateDirectory + "/port-keeper.sock" }

    /// For `vigilctl status`.
    var portKeeperStatus: String {
        if portKeeperCommand == nil { return "disabled (--no-port-keeper)" }
        if accessoryState.portKeeper != nil { return "holding \(accessoryState.ports.count) port(s) at \(portKeeperPath)" }
        if accessoryState.portKeeperFailedAt != nil { return "unavailable: starting one failed (see the log)" }
        return "not running (no port open)"
    }

    /// At start: takes back the ports a keeper holds for an earlier daemon, if
    /// one runs. None is started until a port opens (`keepPort`).
    func connectPortKeeper() {
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
                accessoryState.keptPorts[session] = fd
            }
        } catch {
            // A keeper that was just ending (its daemon left it nothing) may go
            // with this connection; a new one starts with the first port.
            logger.info("the port keeper at \(portKeeperPath) did not answer (\(error)); a new one starts with the first port")
            return
        }
        if !accessoryState.keptPorts.isEmpty {
            logger.info("port keeper held \(accessoryState.keptPorts.count) port(s) of an earlier daemon")
        }
        accessoryState.portKeeper = keeper
    }

    /// Connects to the keeper, starting one (vigild's own `--fd-keeper`) if none
    /// answers, and hands it every port open now (a keeper that was lost held
    /// them). After a failure, tries again a minute later at the earliest.
    private func startPortKeeper() -> FileDescriptorKeeper? {
        guard let command = portKeeperCommand, let executable = command.first else { return nil }
        if let failed = accessoryState.portKeeperFailedAt, now - failed < 60_000_000_000 { return nil }
        do {
            let keeper = try FileDescriptorKeeper.connect(path: portKeeperPath) { listener in
                let spawned = try ProcessSpawner.spawn(SpawnRequest(
                    executable: executable, arguments: Array(command.dropFirst()), input: listener, newSession: true,
                    name: "port keeper"))
                // Not watched: it outlives this daemon on purpose.
                if spawned.pidfd >= 0 { Glibc.close(spawned.pidfd) }
                logger.info("port keeper started (pid \(spawned.pid)) at \(portKeeperPath)")
            }
            accessoryState.portKeeper = keeper
            accessoryState.portKeeperFailedAt = nil
            for (session, port) in accessoryState.ports { try keeper.keep(port.port.fd, name: "session-\(session)") }
            return keeper
        } catch {
            logger.warning("cannot start a port keeper (\(error)): a SIGKILL of vigild will lose what its ports received and it had not read")
            accessoryState.portKeeper?.close()
            accessoryState.portKeeper = nil
            accessoryState.portKeeperFailedAt = now
            return nil
        }
    }

    /// The keeper's port for `session`, if it holds one for `node` that is still open.
    func keptPort(for session: Int, node: String, settings: SerialSettings) -> SerialPort? {
        guard let fd = accessoryState.keptPorts.removeValue(forKey: session) else { return nil }
        guard let port = SerialPort.adopt(fd: fd, path: node, settings: settings) else {
            logger.info("session \(session): the port an earlier daemon left is no longer \(node); opening it anew")
            return nil
        }
        logger.info("session \(session): took back its open port from the port keeper, unread input intact")
        return port
    }

    func keepPort(_ fd: Int32, session: Int) {
        guard let keeper = accessoryState.portKeeper ?? startPortKeeper() else { return }
        do {
            try keeper.keep(fd, name: "session-\(session)")
        } catch {
            lostPortKeeper(error)
        }
    }

    func releaseKeptPort(_ session: Int) {
        guard let keeper = accessoryState.portKeeper else { return }
        do {
            try keeper.drop(name: "session-\(session)")
        } catch {
            lostPortKeeper(error)
        }
    }

    /// After sessions are re-established: what no session took back is closed.
    func releaseUnclaimedKeptPorts() {
        for (session, fd) in accessoryState.keptPorts {
            Glibc.close(fd)
            releaseKeptPort(session)
        }
        accessoryState.keptPorts = [:]
    }

    /// The daemon stops, leaving its ports with the keeper for the next one.
    func disconnectPortKeeper() {
        accessoryState.portKeeper?.close()
        accessoryState.portKeeper = nil
    }

    /// The daemon stops for good: the keeper closes what it holds and ends.
    func endPortKeeper() {
        accessoryState.portKeeper?.quit()
        accessoryState.portKeeper = nil
    }

    private func lostPortKeeper(_ error: any Error) {
        logger.warning("port keeper lost (\(error)): a SIGKILL of vigild will lose what its ports received and it had not read")
        accessoryState.portKeeper?.close()
        accessoryState.portKeeper = nil
    }
}
