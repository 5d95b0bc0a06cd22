import Glibc

/// systemd's journal as an output: whether a descriptor already leads to it,
/// and streams into it for other programs' output.
public enum Journal {
    /// Where journald accepts output streams (as systemd gives services
    /// `StandardOutput=journal`): see systemd-journald.service(8).
    public static let stdoutSocket = "/run/systemd/journal/stdout"

    /// Whether `fd` is the stream systemd connected to the journal for this
    /// service: `$JOURNAL_STREAM` ("DEVICE:INODE") names it, and it is that
    /// file only while the descriptor was not redirected elsewhere, which is
    /// why the numbers are compared rather than the variable's presence taken.
    public static func isConnected(fd: Int32, journalStream: String?) -> Bool {
        guard let journalStream else { return false }
        let parts = journalStream.split(separator: ":")
        guard parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1]) else { return false }
        var info = stat()
        guard fstat(fd, &info) == 0 else { return false }
        return UInt64(info.st_dev) == device && UInt64(info.st_ino) == inode
    }

    /// Whether standard error is the journal stream (`isConnected` for fd 2
    /// and this process's `$JOURNAL_STREAM`).
    public static func isStandardErrorConnected() -> Bool {
        isConnected(fd: 2, journalStream: getenv("JOURNAL_STREAM").map { String(cString: $0) })
    }

    /// The `JOURNAL_STREAM` value naming `fd`, for a process given it as its
    /// output (so it, too, can tell its output goes to the journal).
    public static func streamVariable(for fd: Int32) -> String? {
        var info = stat()
        guard fstat(fd, &info) == 0 else { return nil }
        return "\(info.st_dev):\(info.st_ino)"
    }

    /// A stream into the journal for a program's output, as systemd makes for
    /// a unit's stdout: every line it writes becomes an entry with
    /// `SYSLOG_IDENTIFIER=identifier`, at `priority` unless the line starts
    /// with a `<N>` prefix (sd-daemon(3)). Blocking and close-on-exec; give
    /// it to the program as its stdout and stderr.
    ///
    /// The header is the one sd_journal_stream_fd(3) sends: identifier, unit
    /// (empty: journald finds it from the peer), priority, level prefix, and no
    /// copies to syslog, kmsg or the console.
    public static func openStream(identifier: String, priority: Int32 = 6, socket: String = stdoutSocket) throws -> Int32 {
        guard !identifier.isEmpty, !identifier.contains("\n") else {
            throw SystemError(.invalidArgument, "journal stream identifier '\(identifier)'")
        }
        let stream = try UnixStream.connect(path: socket)
        try stream.shutdown(.read)
        try stream.writeAll(Array("\(identifier)\n\n\(priority)\n1\n0\n0\n0\n".utf8))
        // A copy: the UnixStream closes its own on deinit.
        return try check("fcntl(F_DUPFD_CLOEXEC)", path: socket) { fcntl(stream.fd, F_DUPFD_CLOEXEC, 0) }
    }
}
