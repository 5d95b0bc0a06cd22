import Foundation

/// One line of the demo app's record file (`VIGIL_DEMO_RECORD`), as
/// Sources/Examples/VigilDemoApp/Recorder.swift writes it.
struct DemoRecord: Decodable, Sendable, CustomStringConvertible {
    /// CLOCK_MONOTONIC ns when the item was handled.
    var t: UInt64
    var pid: Int32
    /// `launch`, `lifecycle`, `event`, `taskBegan`, `taskEnded`, `expiring`, `finished`.
    var kind: String
    var reason: String?
    var eventKind: String?
    var state: String?
    var event: String?
    var seq: UInt64?
    var redelivered: Bool?
    var payload: String?
    var task: Int?
    var name: String?
    var remaining: Double?

    var description: String {
        var parts = ["pid \(pid)", kind]
        if let reason { parts.append("reason=\(reason)") }
        if let event { parts.append(event) }
        if let state { parts.append("state=\(state)") }
        if let seq { parts.append("seq=\(seq)") }
        if let redelivered { parts.append("redelivered=\(redelivered)") }
        if let name { parts.append("name=\(name)") }
        if let remaining { parts.append("remaining=\(remaining)") }
        return parts.joined(separator: " ")
    }

    /// Every whole line of `path`; none if it does not exist yet.
    static func read(_ path: String) -> [DemoRecord] {
        guard let data = FileManager.default.contents(atPath: path) else { return [] }
        let decoder = JSONDecoder()
        return data.split(separator: UInt8(ascii: "\n")).compactMap { try? decoder.decode(DemoRecord.self, from: Data($0)) }
    }
}

extension Array where Element == DemoRecord {
    var events: [DemoRecord] { filter { $0.kind == "event" } }
    var launches: [DemoRecord] { filter { $0.kind == "launch" } }
    func of(pid: Int32) -> [DemoRecord] { filter { $0.pid == pid } }
    func kind(_ kind: String) -> [DemoRecord] { filter { $0.kind == kind } }
    var summary: String { map(\.description).joined(separator: "\n  ") }
}
