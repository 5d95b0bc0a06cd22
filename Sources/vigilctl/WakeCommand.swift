import ArgumentParser
import FoundationEssentials
import Glibc
import VigilKit

struct Wake: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Deliver an event to an app, waking or launching it as a real source would."
    )

    @OptionGroup var options: GlobalOptions

    @Argument(help: "The app id.")
    var app: String

    @Option(help: "The event kind.")
    var kind = "test"

    @Option(
        name: .customLong("attribute"),
        help: ArgumentHelp(
            "An attribute key=value; repeatable. A value that parses as JSON (3, true, \"3\") is taken as such, else as a string.",
            valueName: "key=value"
        )
    )
    var attributes: [String] = []

    @Option(help: "The payload, as UTF-8 text.")
    var payload: String?

    @Option(help: "Read the payload's bytes from this file.")
    var payloadFile: String?

    func validate() throws {
        if payload != nil, payloadFile != nil {
            throw ValidationError("give --payload or --payload-file, not both")
        }
        for attribute in attributes where !attribute.contains("=") {
            throw ValidationError("attribute '\(attribute)' is not key=value")
        }
    }

    func run() async throws {
        let accepted = try await options.connect().wake(
            app: app, kind: kind, attributes: parsedAttributes(), payload: try payloadBytes()
        )
        if options.json { return try printJSON(accepted) }
        print("\(app): event \(accepted.seq) \(accepted.disposition)")
    }

    private func parsedAttributes() -> [String: JSONValue] {
        var parsed: [String: JSONValue] = [:]
        for attribute in attributes {
            let (key, value) = attribute.splitOnce(at: "=")
            parsed[key] = (try? JSONDecoder().decode(JSONValue.self, from: Data(value.utf8))) ?? .string(value)
        }
        return parsed
    }

    private func payloadBytes() throws -> [UInt8] {
        if let payloadFile {
            guard let data = FileManager.default.contents(atPath: payloadFile) else {
                throw ValidationError("cannot read payload file '\(payloadFile)'")
            }
            return Array(data)
        }
        return Array((payload ?? "").utf8)
    }
}

extension String {
    fileprivate func splitOnce(at separator: Character) -> (String, String) {
        guard let index = firstIndex(of: separator) else { return (self, "") }
        return (String(self[..<index]), String(self[self.index(after: index)...]))
    }
}
