import FoundationEssentials
import Glibc
import VigilProtocol

/// Seconds as a person reads them: `850ms`, `4.2s`, `3m05s`, `2h10m`.
func formatSeconds(_ seconds: Double) -> String {
    guard seconds.isFinite else { return "∞" }
    switch seconds {
    case 0: return "0s"
    case ..<1: return "\(Int((seconds * 1000).rounded()))ms"
    case ..<60: return cFormat("%.1fs", seconds)
    case ..<3600: return cFormat("%dm%02ds", Int(seconds) / 60, Int(seconds) % 60)
    default: return cFormat("%dh%02dm", Int(seconds) / 3600, Int(seconds) / 60 % 60)
    }
}

/// A decision's wall-clock time, local (`TZ`, else /etc/localtime), to the
/// millisecond: `2026-11-28 10:55:01.042`. Rounded to the millisecond as
/// Foundation's `Date` and `DateFormatter` rounded (through seconds since
/// 2001, half a millisecond added, then cut), so the text is the one vigilctl
/// printed with Foundation (issue 32).
func formatTime(_ secondsSince1970: Double) -> String {
    let since2001 = secondsSince1970 - 978_307_200
    let milliseconds = ((since2001 + 978_307_200) * 1000 + 0.5).rounded(.down)
    // Beyond what time_t and a four-digit year hold (not a time vigild sends): the number itself.
    guard milliseconds.isFinite, abs(milliseconds) < 253_402_300_800_000 else { return "\(secondsSince1970)" }
    var seconds = time_t((milliseconds / 1000).rounded(.down))
    let millisecond = Int(milliseconds - Double(seconds) * 1000)
    var parts = tm()
    _ = LocalTime.prepare
    guard localtime_r(&seconds, &parts) != nil else { return "\(secondsSince1970)" }
    return cFormat(
        "%04d-%02d-%02d %02d:%02d:%02d.%03d", Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1, Int(parts.tm_mday),
        Int(parts.tm_hour), Int(parts.tm_min), Int(parts.tm_sec), millisecond)
}

/// localtime_r need not read `TZ` (POSIX): tzset once, before the first.
private enum LocalTime {
    static let prepare: Void = tzset()
}

/// A wire name as words for a table: `enterBackground` -> `enter background`
/// (`--json` keeps the wire names).
func spacedWords(_ camelCase: String) -> String {
    var words = ""
    for character in camelCase {
        if character.isUppercase, !words.isEmpty { words.append(" ") }
        words.append(contentsOf: character.lowercased())
    }
    return words
}

/// Text to stderr in one `write(2)`, unbuffered (as `FileHandle` wrote it):
/// notes and failures, seen at once and never mixed into a line of stdout.
func writeStandardError(_ text: String) {
    var bytes = Array(text.utf8)[...]
    while !bytes.isEmpty {
        let written = bytes.withUnsafeBytes { write(STDERR_FILENO, $0.baseAddress, $0.count) }
        if written < 0 && errno == EINTR { continue }
        guard written > 0 else { return }
        bytes = bytes.dropFirst(written)
    }
}

extension String {
    /// Without the white space (Unicode White_Space, newlines included) at either end.
    func trimmingWhitespace() -> String {
        String(drop(while: \.isWhitespace).reversed().drop(while: \.isWhitespace).reversed())
    }
}
