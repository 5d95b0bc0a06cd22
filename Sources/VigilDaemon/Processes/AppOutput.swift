import FoundationEssentials
import Glibc
import Logging
import VigilConfig
import VigilLifecycle
import VigilSystem

/// Where an app's standard output and error go (`app-output`).
///
/// Under systemd, to the journal: one stream per launch, opened by the daemon
/// like systemd opens a unit's (`Journal.openStream`), with the app id as
/// SYSLOG_IDENTIFIER, so `journalctl -t ID` shows it, `<N>` prefixes the app
/// writes set priorities, and journald's own size limits and rotation apply.
/// Elsewhere (a per-user daemon in a terminal, a machine without journald),
/// to `<log-dir>/<id>.log`, rotated at launch once past `app-log-size`: the
/// app holds the file open, so it cannot be cut under a running app without
/// losing or repeating its lines.
///
/// The stream or file is opened here, as the daemon, before the child drops
/// its privileges: the app writes to it without needing any right on the
/// log folder or the journal socket.
struct AppOutput {
    /// The descriptor to give the app as stdout and stderr (the caller closes it).
    var fd: Int32
    /// `JOURNAL_STREAM` for the app when `fd` is a journal stream.
    var journalStream: String?
}

extension AppProcesses {
    static func outputToJournal(_ config: DaemonConfig) -> Bool {
        switch config.appOutput {
        case .journal: true
        case .files: false
        case .automatic: Journal.isStandardErrorConnected()
        }
    }

    /// Opens the app's output and writes `banner` (a line saying what was
    /// started, as whom) at its top, after a timestamp in a file (the journal
    /// has its own). A journal that cannot be reached falls
    /// back to the file, said in the daemon's log.
    func openOutput(_ app: String, banner: String, config: DaemonConfig, logger: Logger) throws -> AppOutput {
        var output: AppOutput?
        if Self.outputToJournal(config) {
            do {
                let fd = try Journal.openStream(identifier: app)
                output = AppOutput(fd: fd, journalStream: Journal.streamVariable(for: fd))
            } catch {
                logger.error("cannot open a journal stream for \(app)'s output, writing it to \(Self.logPath(of: app, config: config)): \(error)", metadata: ["app": "\(app)"])
            }
        }
        if output == nil {
            rotateLog(app, config: config, logger: logger)
            let fd = open(Self.logPath(of: app, config: config), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0o640)
            guard fd >= 0 else {
                throw DaemonError("cannot open log \(Self.logPath(of: app, config: config)): \(String(cString: strerror(errno)))")
            }
            output = AppOutput(fd: fd)
        }
        if output!.journalStream != nil { outputInJournal.insert(app) } else { outputInJournal.remove(app) }
        let line = output!.journalStream != nil ? banner + "\n" : "--- \(Date()) \(banner)\n"
        _ = line.withCString { Glibc.write(output!.fd, $0, strlen($0)) }
        return output!
    }

    /// Moves `<id>.log` to `<id>.log.1` (replacing it) once it is past
    /// `app-log-size`. Called at launch only, when no process of the app writes.
    private func rotateLog(_ app: String, config: DaemonConfig, logger: Logger) {
        let path = Self.logPath(of: app, config: config)
        var info = stat()
        guard lstat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG, Int(info.st_size) > config.appLogSize else { return }
        if rename(path, path + ".1") == 0 {
            logger.info("\(path) is past app-log-size (\(info.st_size) bytes): moved to \(path).1", metadata: ["app": "\(app)"])
        } else {
            logger.error("cannot rotate \(path): \(String(cString: strerror(errno)))", metadata: ["app": "\(app)"])
        }
    }
}
