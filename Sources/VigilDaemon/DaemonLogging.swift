import Glibc
import Logging
import VigilSystem

/// How vigild logs: one choice, made at start.
///
/// Under systemd with its standard error connected to the journal
/// (`$JOURNAL_STREAM` names that very stream), lines carry a `<N>` syslog
/// priority prefix, which journald turns into the entry's PRIORITY (so
/// `journalctl -p err -u vigild` finds errors), and no timestamp or level of
/// their own: journald stamps each entry, and a second timestamp in the text
/// only doubles it. Anywhere else (a terminal, a file, a test) the format is
/// swift-log's `StreamLogHandler`, timestamp and level first.
///
/// Metadata goes into the text as `key=value` (`app=ID` on every line about
/// an app): the `<N>` stream protocol cannot carry fields of its own, and
/// journald's native protocol (a datagram per entry, with APP_ID= fields)
/// would be a second path from every log call to a socket for a field that
/// `journalctl -u vigild --grep app=ID` finds as well.
public enum DaemonLogging {
    public static func bootstrap(level: Logger.Level, journal: Bool = Journal.isStandardErrorConnected()) {
        LoggingSystem.bootstrap { label in
            if journal { return JournalLogHandler(logLevel: level) }
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
    }
}

/// Writes `<N>message key=value` lines to standard error for journald.
struct JournalLogHandler: LogHandler {
    var logLevel: Logger.Level
    var metadata: Logger.Metadata = [:]
    var metadataProvider: Logger.MetadataProvider?

    init(logLevel: Logger.Level) {
        self.logLevel = logLevel
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var all = metadata
        if let provided = metadataProvider?.get() { all.merge(provided) { _, new in new } }
        if let extra = event.metadata { all.merge(extra) { _, new in new } }
        let text = Self.format(level: event.level, message: "\(event.message)", metadata: all)
        // One write for the whole entry: lines of concurrent entries never interleave.
        var bytes = Array(text.utf8)
        bytes.withUnsafeMutableBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let written = Glibc.write(2, buffer.baseAddress! + offset, buffer.count - offset)
                if written < 0 && errno == EINTR { continue }
                guard written > 0 else { return }
                offset += written
            }
        }
    }

    /// `<N>` before every line of the message (journald reads each line as an
    /// entry), the metadata after its last line, sorted by key.
    static func format(level: Logger.Level, message: String, metadata: Logger.Metadata) -> String {
        let prefix = "<\(priority(level))>"
        var text = message
        if !metadata.isEmpty {
            text += " " + metadata.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
        }
        return text.split(separator: "\n", omittingEmptySubsequences: false).map { prefix + $0 + "\n" }.joined()
    }

    /// syslog(3) priorities, as sd-daemon(3)'s SD_ERR and friends.
    static func priority(_ level: Logger.Level) -> Int {
        switch level {
        case .trace, .debug: 7
        case .info: 6
        case .notice: 5
        case .warning: 4
        case .error: 3
        case .critical: 2
        }
    }
}
