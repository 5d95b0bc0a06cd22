import ArgumentParser
import FoundationEssentials
import Glibc
import VigilKit

struct Accessories: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List connected accessories and open sessions, or watch accessories come and go.",
        subcommands: [AccessoriesList.self, AccessoriesWatch.self],
        defaultSubcommand: AccessoriesList.self
    )
}

struct AccessoriesList: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list",
        abstract: "List connected accessories, and open sessions with their traffic and loss."
    )

    @OptionGroup var options: GlobalOptions

    func run() async throws {
        let list = try await options.connect().accessories()
        if options.json { return try printJSON(list) }
        print(AccessoryTable(list.accessories).text)
        for problem in list.problems ?? [] {
            print("problem: connection \(problem.connectionID): \(problem.problem): \(problem.detail)")
        }
        let sessions = list.sessions ?? []
        print(sessions.isEmpty ? "\nno open sessions" : "\n" + SessionTable(sessions).text)
    }
}

struct AccessoriesWatch: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "watch",
        abstract: "Print accessories as they connect and disconnect, one line each, until interrupted.",
        discussion: "Accessories already connected come first, as 'present'. With --json, each line is a JSON object {\"change\", \"accessory\"}."
    )

    @OptionGroup var options: GlobalOptions

    func run() async throws {
        let client = try await options.connect()
        let watch = try await client.watchAccessories()
        for accessory in watch.accessories { try emit(AccessoryChangeLine(change: "present", accessory: accessory)) }
        for await event in watch.changes { try emit(AccessoryChangeLine(change: event.change, accessory: event.accessory)) }
        throw ProtocolError(.disconnected, "vigild closed the connection")
    }

    /// Unbuffered, line by line: the output is often a pipe to a script waiting for it.
    private func emit(_ line: AccessoryChangeLine) throws {
        StandardStreams.writeOut(Array(((options.json ? try line.json() : line.text) + "\n").utf8))
    }
}

struct Accessory: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Work with one accessory.",
        subcommands: [AccessoryOpen.self, AccessoryHID.self]
    )
}
