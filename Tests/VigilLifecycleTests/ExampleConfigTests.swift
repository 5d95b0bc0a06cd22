import Foundation
import Testing
@testable import VigilConfig
@testable import VigilLifecycle

/// The example config the Debian package installs as /etc/vigil/vigild.toml
/// (dist/vigild.toml), the reference (docs/configuration.md) and the manifest
/// man page (docs/man/vigil-manifest.5) must say what the code does: every
/// key, each commented-out value the default.
@Suite("Example config and reference")
struct ExampleConfigTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
    let example = repository.appendingPathComponent("dist/vigild.toml").path
    let reference = repository.appendingPathComponent("docs/configuration.md").path
    let manifestPage = repository.appendingPathComponent("docs/man/vigil-manifest.5").path
    let defaults = DaemonConfig(system: true, environment: [:])

    func text(_ path: String) throws -> String {
        try String(contentsOfFile: path, encoding: .utf8)
    }

    /// `#key = value` lines with the `#` removed: the defaults written out.
    func uncommented() throws -> String {
        try text(example).split(separator: "\n", omittingEmptySubsequences: false).map { line in
            line.wholeMatch(of: /#([a-z][a-z-]*) = .*/) != nil ? String(line.dropFirst()) : String(line)
        }.joined(separator: "\n")
    }

    @Test func theExampleAsShippedChangesNothing() throws {
        let config = try DaemonConfig.parse(try text(example), file: example, defaults: defaults)
        #expect(config == defaults)
    }

    @Test func everyCommentedValueIsTheDefault() throws {
        var config = try DaemonConfig.parse(try uncommented(), file: example, defaults: defaults)
        #expect(config.socket == "/run/vigil/vigild.sock")
        config.socket = nil  // the default is computed, not a value
        #expect(config == defaults)
    }

    @Test func everyKeyIsInTheExampleAndTheReference() throws {
        let example = try text(example)
        let reference = try text(reference)
        let keys = DaemonConfig.knownFields.subtracting(["timings", "accessory", "mqtt"])
            .union(DaemonConfig.knownTimings).union(MQTTSettings.knownKeys)
        for key in keys.sorted() {
            #expect(example.contains("#\(key) = ") || example.contains("# e.g. \(key) = "), "dist/vigild.toml lacks \(key)")
            #expect(
                reference.contains("`\(key)`") || reference.contains("`timings.\(key)`") || reference.contains("`mqtt.\(key)`"),
                "docs/configuration.md lacks \(key)")
        }
        for key in AccessoryRule.knownFields.sorted() {
            #expect(reference.contains("`\(key)`"), "docs/configuration.md lacks accessory key \(key)")
        }
    }

    @Test func theManifestManPageHasEveryKey() throws {
        let page = try text(manifestPage)
        for key in AppManifest.knownFields.sorted() {
            #expect(page.contains(".BR \(key) ") || page.contains(".BR [\(key)] "), "vigil-manifest(5) lacks \(key)")
        }
    }
}
