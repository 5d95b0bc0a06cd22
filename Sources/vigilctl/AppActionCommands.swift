import ArgumentParser
import VigilKit

/// The commands that act on one app as the user or the system would.
protocol AppActionCommand: AsyncParsableCommand {
    static var action: UserAction { get }
    var options: GlobalOptions { get }
    var app: String { get }
}

extension AppActionCommand {
    func run() async throws {
        let info = try await options.connect().perform(Self.action, app: app)
        if options.json { return try printJSON(info) }
        print(AppTable([info]).text)
    }
}

struct Launch: AppActionCommand {
    static let configuration = CommandConfiguration(abstract: "Launch an app in the foreground (or bring it there), as the user.")
    static let action = UserAction.launch
    @OptionGroup var options: GlobalOptions
    @Argument(help: "The app id.") var app: String
}

struct Background: AppActionCommand {
    static let configuration = CommandConfiguration(abstract: "Send an app to the background, as pressing Home.")
    static let action = UserAction.background
    @OptionGroup var options: GlobalOptions
    @Argument(help: "The app id.") var app: String
}

struct Foreground: AppActionCommand {
    static let configuration = CommandConfiguration(abstract: "Bring a background or suspended app back to the foreground.")
    static let action = UserAction.foreground
    @OptionGroup var options: GlobalOptions
    @Argument(help: "The app id.") var app: String
}

struct Quit: AppActionCommand {
    static let configuration = CommandConfiguration(
        abstract: "Force-quit an app as the user: events do not relaunch it until it is launched again."
    )
    static let action = UserAction.quit
    @OptionGroup var options: GlobalOptions
    @Argument(help: "The app id.") var app: String
}

struct Terminate: AppActionCommand {
    static let configuration = CommandConfiguration(
        abstract: "Terminate an app as the system would (memory pressure): a later event relaunches it."
    )
    static let action = UserAction.terminate
    @OptionGroup var options: GlobalOptions
    @Argument(help: "The app id.") var app: String
}
