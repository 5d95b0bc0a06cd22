extension DecisionRecord {
    /// The record as one line of JSON (with its newline), written without
    /// Foundation's encoder: the daemon appends one per decision, and a wake
    /// is two decisions. Members in `String` order, as `JSONEncoder` with
    /// `.sortedKeys` writes them, so `JSONDecoder` reads the line back.
    public var jsonLine: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(96 + reason.utf8.count)
        out.append(contentsOf: #"{"action":"#.utf8)
        EventHeaderWriter.appendString(action, to: &out)
        out.append(contentsOf: #","app":"#.utf8)
        EventHeaderWriter.appendString(app, to: &out)
        out.append(contentsOf: #","reason":"#.utf8)
        EventHeaderWriter.appendString(reason, to: &out)
        out.append(contentsOf: #","state":"#.utf8)
        EventHeaderWriter.appendString(state.rawValue, to: &out)
        out.append(contentsOf: #","time":"#.utf8)
        // Finite always (a clock reading); JSON has no NaN or infinity.
        out.append(contentsOf: (time.isFinite ? "\(time)" : "0").utf8)
        out.append(contentsOf: "}\n".utf8)
        return out
    }
}

extension DeviceRecord {
    /// One line of JSON, as `DecisionRecord.jsonLine`.
    public var jsonLine: [UInt8] {
        var out: [UInt8] = []
        out.append(contentsOf: #"{"change":"#.utf8)
        EventHeaderWriter.appendString(change, to: &out)
        out.append(contentsOf: #","detail":"#.utf8)
        EventHeaderWriter.appendString(detail, to: &out)
        out.append(contentsOf: #","device":"#.utf8)
        EventHeaderWriter.appendString(device, to: &out)
        out.append(contentsOf: #","kind":"#.utf8)
        EventHeaderWriter.appendString(kind, to: &out)
        out.append(contentsOf: #","time":"#.utf8)
        out.append(contentsOf: (time.isFinite ? "\(time)" : "0").utf8)
        out.append(contentsOf: "}\n".utf8)
        return out
    }
}
