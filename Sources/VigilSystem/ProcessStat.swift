import Glibc

/// The few fields of /proc/PID/stat that identify a process across a daemon
/// restart: its start time tells a pid that was reused apart from the process
/// that was recorded under it.
public struct ProcessStat: Sendable, Equatable {
    /// R, S, D, T (stopped), t, Z, X…
    public var state: Character
    public var processGroup: pid_t
    public var session: pid_t
    /// Field 22: clock ticks after boot at which the process started.
    public var startTime: UInt64

    /// Reads /proc/PID/stat; nil if the process is gone (or the line is not understood).
    public static func read(_ pid: pid_t) -> ProcessStat? {
        guard let text = try? FileSystem.read("/proc/\(pid)/stat") else { return nil }
        return parse(text)
    }

    /// "PID (COMM) STATE PPID PGRP SESSION …": COMM may contain spaces and
    /// parentheses, so the fields are counted from its last ')'.
    public static func parse(_ line: String) -> ProcessStat? {
        guard let close = line.lastIndex(of: ")") else { return nil }
        let fields = line[line.index(after: close)...].split(separator: " ")
        // fields[0] is field 3 (state); field 22 (starttime) is fields[19].
        guard fields.count > 19, let state = fields[0].first, let group = pid_t(fields[2]), let session = pid_t(fields[3]),
              let start = UInt64(fields[19]) else { return nil }
        return ProcessStat(state: state, processGroup: group, session: session, startTime: start)
    }

    /// Whether the process is gone in all but its entry (a zombie, or dead).
    public var hasEnded: Bool { state == "Z" || state == "X" }
    /// Stopped by a signal (SIGSTOP), as the signal fallback suspends apps.
    public var isStopped: Bool { state == "T" }
}
