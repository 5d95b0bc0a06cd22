import Foundation

/// Seconds as a person reads them: `850ms`, `4.2s`, `3m05s`, `2h10m`.
func formatSeconds(_ seconds: Double) -> String {
    guard seconds.isFinite else { return "∞" }
    switch seconds {
    case 0: return "0s"
    case ..<1: return "\(Int((seconds * 1000).rounded()))ms"
    case ..<60: return String(format: "%.1fs", seconds)
    case ..<3600: return String(format: "%dm%02ds", Int(seconds) / 60, Int(seconds) % 60)
    default: return String(format: "%dh%02dm", Int(seconds) / 3600, Int(seconds) / 60 % 60)
    }
}

/// A decision's wall-clock time, local, to the millisecond.
func formatTime(_ secondsSince1970: Double) -> String {
    let formatter = DateFormatter()
    formatter.dateFormat = "yyyy-MM-dd HH:mm:ss.SSS"
    return formatter.string(from: Date(timeIntervalSince1970: secondsSince1970))
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
