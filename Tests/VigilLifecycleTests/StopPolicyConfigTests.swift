import Testing
@testable import VigilConfig
@testable import VigilLifecycle

@Suite("Config: on-stop")
struct StopPolicyConfigTests {
    let file = "/etc/vigil/vigild.toml"
    let defaults = DaemonConfig(system: true, environment: [:])

    @Test func leaveByDefaultTerminateWhenAsked() throws {
        #expect(defaults.onStop == .leave)
        #expect(try DaemonConfig.parse("on-stop = \"terminate\"\n", file: file, defaults: defaults).onStop == .terminate)
        #expect(try DaemonConfig.parse("on-stop = \"leave\"\n", file: file, defaults: defaults).onStop == .leave)
    }

    @Test func unknownPolicyIsRefusedNamingTheKeyAndValue() {
        do {
            _ = try DaemonConfig.parse("on-stop = \"kill\"\n", file: file, defaults: defaults)
            Issue.record("on-stop = \"kill\" was accepted")
        } catch {
            let text = "\(error)"
            #expect(text.contains(file) && text.contains("on-stop") && text.contains("leave, terminate") && text.contains("kill"), "\(text)")
        }
    }
}
