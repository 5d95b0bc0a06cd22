extension DecisionRecord {
    /// The record as one line of JSON (with its newline), written without
    /// Foundation's encoder: the daemon appends one per decision, and a wake
    /// is two decisions. Members in `String` order, as `JSONEncoder` with
    /// `.sortedKeys` writes them, so `JSONDecoder` reads the line back.
    public var jsonLine: [UInt8] {
        JSONLine.write([("action", action), ("app", app), ("reason", reason), ("state", state.rawValue)], time: time)
    }
}

extension DeviceRecord {
    /// One line of JSON, as `DecisionRecord.jsonLine`.
    public var jsonLine: [UInt8] {
        JSONLine.write([("change", change), ("detail", detail), ("device", device), ("kind", kind)], time: time)
    }
}

/// The records kept as JSON lines: string members, then `time`.
enum JSONLine {
    /// `strings` must come in key order, all before "time".
    static func write(_ strings: [(key: String, value: String)], time: Double) -> [UInt8] {
        var out: [UInt8] = [UInt8(ascii: "{")]
        out.reserveCapacity(96 + strings.reduce(0) { $0 + $1.value.utf8.count })
        for (key, value) in strings {
            EventHeaderWriter.appendString(key, to: &out)
            out.append(UInt8(ascii: ":"))
            EventHeaderWriter.appendString(value, to: &out)
            out.append(UInt8(ascii: ","))
        }
        // Finite always (a clock reading); JSON has no NaN or infinity.
        out.append(contentsOf: #""time":"#.utf8)
        out.append(contentsOf: (time.isFinite ? "\(time)" : "0").utf8)
        out.append(contentsOf: "}\n".utf8)
        return out
    }
}
