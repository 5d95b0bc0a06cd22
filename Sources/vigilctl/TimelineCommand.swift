import ArgumentParser
import FoundationEssentials
import Glibc
import VigilKit
import VigilTimeline

/// `vigilctl timeline`: the decision log drawn as one lane per app.
struct TimelineCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "timeline",
        abstract: "Draw what the daemon decided: one lane per app (states, wakes, time used, tasks).",
        discussion: """
            Writes an SVG picture (--format svg, the default) or a Chrome/Perfetto trace (--format trace: \
            open it at ui.perfetto.dev). The picture covers the decision log the daemon still holds \
            (decision-log-size decisions), or the last --since seconds of it.
            """
    )

    enum Format: String, ExpressibleByArgument, CaseIterable {
        case svg, trace
    }

    @OptionGroup var options: GlobalOptions

    @Option(help: "Only this app's lane.")
    var app: String?

    @Option(help: "Only the last N seconds (N > 0).")
    var since: Double?

    @Option(help: "svg or trace.")
    var format: Format = .svg

    @Option(name: .shortAndLong, help: "The file to write ('-' for standard output).")
    var output: String

    func validate() throws {
        if let since, !(since.isFinite && since > 0) {
            throw ValidationError("--since is \(since); it must be a number of seconds above 0")
        }
    }

    func run() async throws {
        let control = try await options.connect()
        let log = try await control.logWithDevices(app: app)
        let decisions = log.decisions
        let budget = try? await control.status().timings["wake-budget"]
        let now = Date().timeIntervalSince1970
        let timeline = Timeline(decisions: decisions, devices: log.devices ?? [], start: since.map { now - $0 }, end: now)
        let data: Data = switch format {
        case .svg: Data(TimelineSVG(timeline, wakeBudget: budget).text.utf8)
        case .trace: try TimelineTrace(timeline).data()
        }
        if output == "-" {
            StandardStreams.writeOut(Array(data))
        } else {
            do {
                try Files.write(Array(data), to: output)
            } catch {
                throw WriteFailed(description: "cannot write \(output): \(error)")
            }
            if !options.json {
                print("\(output): \(timeline.lanes.count) app lane(s), \(timeline.devices.count) device lane(s), \(decisions.count) decision(s)")
            }
        }
    }
}

/// A file the command was told to write could not be: a failure (status 1), not a usage error.
struct WriteFailed: Error, CustomStringConvertible {
    let description: String
}
