import Glibc

/// Named crash points, for testing crash safety step by step rather than by
/// random kills (docs/reliability.md, "Crash points"; issue 26, part 3).
///
/// Inert unless the environment variable `VIGIL_CRASH_POINT` is set when the
/// process starts: `NAME[:before|after][:N][@FILE]`, several separated by
/// commas. The process then SIGKILLs itself at the Nth time (default the
/// first) it reaches that point, right before or right after (default) the
/// durable write the point names. With `@FILE`, hits count only once FILE
/// exists: a test arms the point deep in a scenario whose earlier writes of
/// the same kind vary in number from run to run (a file, not a signal: no
/// handler in the daemon, one `access(2)` per hit only while armed). With the variable unset a point costs one load of
/// an empty array. Nothing in the packages sets it (the unit files and the
/// package's tests do not); vigild logs it at start when it is set.
///
/// Components add points with `CrashPoint.reach(_:_:)` at each durable
/// step; docs/reliability.md lists them and the outcome the tests check.
public enum CrashPoint {
    public enum Moment: String, Sendable {
        case before, after
    }

    public struct Armed: Sendable, Equatable {
        public var name: String
        public var moment: Moment
        /// Dies at this hit (1: the first).
        public var hit: Int
        /// Hits count only while this file exists (`@FILE`); nil: from the start.
        public var gate: String?

        public init(name: String, moment: Moment, hit: Int, gate: String? = nil) {
            self.name = name
            self.moment = moment
            self.hit = hit
            self.gate = gate
        }
    }

    /// What `VIGIL_CRASH_POINT` asks for; empty when it is unset or empty.
    public static let armed: [Armed] = parse(getenv("VIGIL_CRASH_POINT").map { String(cString: $0) } ?? "")

    private static let hits = Locked<[String: Int]>([:])

    /// Parses `NAME[:before|after][:N][@FILE]`, comma-separated; malformed entries are skipped.
    public static func parse(_ text: String) -> [Armed] {
        text.split(separator: ",").compactMap { whole -> Armed? in
            let gated = whole.split(separator: "@", maxSplits: 1, omittingEmptySubsequences: false)
            let entry = gated[0]
            let gate = gated.count > 1 ? String(gated[1]) : nil
            if let gate, gate.isEmpty { return nil }
            let parts = entry.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
            guard let name = parts.first, !name.isEmpty, parts.count <= 3 else { return nil }
            var moment = Moment.after
            var hit = 1
            if parts.count > 1 {
                guard let value = Moment(rawValue: parts[1]) else { return nil }
                moment = value
            }
            if parts.count > 2 {
                guard let value = Int(parts[2]), value >= 1 else { return nil }
                hit = value
            }
            return Armed(name: name, moment: moment, hit: hit, gate: gate)
        }
    }

    /// The process reached `name` (`before` or `after` its write): dies here
    /// if that is armed and this is the hit asked for.
    /// The name is an autoclosure: a name built per call (a journal write's
    /// kinds, an MQTT spool's) costs nothing while no point is armed.
    @inline(__always)
    public static func reach(_ name: @autoclosure () -> String, _ moment: Moment) {
        guard !armed.isEmpty else { return }
        reachArmed([name()], moment)
    }

    /// As `reach(_:_:)` for a write that is several steps at once (a journal
    /// write holding an event, a `sent` and an acknowledgement).
    @inline(__always)
    public static func reach(_ names: @autoclosure () -> [String], _ moment: Moment) {
        guard !armed.isEmpty else { return }
        reachArmed(names(), moment)
    }

    private static func reachArmed(_ names: [String], _ moment: Moment) {
        for point in armed where point.moment == moment && names.contains(point.name) {
            if let gate = point.gate, access(gate, F_OK) != 0 { continue }
            let key = "\(point.name):\(moment.rawValue)"
            let count = hits.withLock { hits -> Int in
                hits[key, default: 0] += 1
                return hits[key]!
            }
            guard count == point.hit else { continue }
            let line = "crash point \(key) (hit \(count)): SIGKILL\n"
            _ = line.withCString { write(STDERR_FILENO, $0, strlen($0)) }
            kill(getpid(), SIGKILL)
        }
    }
}
