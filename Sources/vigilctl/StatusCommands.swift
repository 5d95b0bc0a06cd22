import FoundationEssentials
import Glibc
import ArgumentParser
import VigilKit

struct Status: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Show the daemon, its suspension mechanism and timings, and whether Bluetooth and udev work (and if not, why).")

    @OptionGroup var options: GlobalOptions

    func run() async throws {
        let status = try await options.connect().status()
        if options.json { return try printJSON(status) }
        print(StatusReport(status).text)
    }
}

struct Apps: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "List the apps with their state, wakes and background time.")

    @OptionGroup var options: GlobalOptions

    func run() async throws {
        let apps = try await options.connect().apps()
        if options.json { return try printJSON(apps) }
        print(AppTable(apps).text)
    }
}

struct Log: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Show the decision log, oldest first.")

    @OptionGroup var options: GlobalOptions

    @Option(help: "Only this app's decisions.")
    var app: String?

    @Option(help: "Only the last N decisions (N ≥ 0).")
    var limit: Int?

    @Option(help: "Only the decisions of the last N seconds (N > 0).")
    var since: Double?

    @Flag(help: "Then print each new decision as it is made (one JSON object per line with --json), until interrupted.")
    var follow = false

    func validate() throws {
        if let limit, limit < 0 {
            throw ValidationError("--limit is \(limit); it must be an integer in 0…2^63-1")
        }
        if let since, !(since.isFinite && since > 0) {
            throw ValidationError("--since is \(since); it must be a number of seconds above 0")
        }
    }

    func run() async throws {
        let control = try await options.connect()
        let from = since.map { Date().timeIntervalSince1970 - $0 }
        guard follow else {
            let decisions = try await control.log(app: app, limit: limit, since: from)
            if options.json { return try printJSON(decisions) }
            return print(DecisionTable(decisions).text)
        }
        let (decisions, updates) = try await control.followLog(app: app, limit: limit, since: from)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        func emit(_ records: [DecisionRecord]) throws {
            if options.json {
                for record in records { print(String(decoding: try encoder.encode(record), as: UTF8.self)) }
            } else {
                for record in records { print(DecisionTable.line(record)) }
            }
            fflush(nil)  // all output streams: each line is seen at once through a pipe
        }
        try emit(decisions)
        for await record in updates { try emit([record]) }
        throw ProtocolError(.disconnected, "vigild closed the connection")
    }
}

struct Reload: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Reread the manifest directories.")

    @OptionGroup var options: GlobalOptions

    func run() async throws {
        let result = try await options.connect().reload()
        if options.json { return try printJSON(result) }
        print("reloaded \(result.apps.count) app(s): \(result.apps.joined(separator: ", "))")
        for problem in result.problems { print("problem: \(problem)") }
    }
}
