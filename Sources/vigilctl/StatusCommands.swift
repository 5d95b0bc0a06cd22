import ArgumentParser
import VigilKit

struct Status: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Show the daemon, its suspension mechanism and timings.")

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

    func validate() throws {
        if let limit, limit < 0 {
            throw ValidationError("--limit is \(limit); it must be an integer in 0…2^63-1")
        }
    }

    func run() async throws {
        let decisions = try await options.connect().log(app: app, limit: limit)
        if options.json { return try printJSON(decisions) }
        print(DecisionTable(decisions).text)
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
