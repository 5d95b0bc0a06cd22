import Testing
import VigilProtocol
@testable import VigilConfig
@testable import VigilLifecycle

/// `[mqtt]` in vigild.toml and `mqtt-topics` in manifests (docs/fleet.md).
@Suite("MQTT configuration and manifests")
struct MQTTConfigTests {
    let defaults = DaemonConfig(system: true, environment: [:])

    func problem(_ text: String) -> ManifestProblem? {
        do {
            _ = try DaemonConfig.parse(text, file: "/etc/vigil/vigild.toml", defaults: defaults)
            return nil
        } catch {
            return error
        }
    }

    @Test func noBrokerMeansNoMQTT() throws {
        #expect(!defaults.mqtt.isEnabled)
        let config = try DaemonConfig.parse("[mqtt]\nkeepalive = 30\n", file: "/etc/vigil/vigild.toml", defaults: defaults)
        #expect(!config.mqtt.isEnabled)
        #expect(config.mqtt.keepAlive == 30)
    }

    @Test func everyKeyIsAppliedAndPathsAreResolved() throws {
        let text = """
            [mqtt]
            broker = "mqtts://broker.example.net:8883"
            client-id = "gw17"
            username = "gw"
            password-file = "secret"
            ca-file = "/etc/ssl/ca.pem"
            cert-file = "gw.crt"
            key-file = "gw.key"
            keepalive = 20
            outbox-limit = 50
            outbox-size = 4096
            """
        let mqtt = try DaemonConfig.parse(text, file: "/etc/vigil/vigild.toml", defaults: defaults).mqtt
        #expect(mqtt.broker == "mqtts://broker.example.net:8883")
        #expect(mqtt.clientID == "gw17")
        #expect(mqtt.username == "gw")
        #expect(mqtt.passwordFile == "/etc/vigil/secret")
        #expect(mqtt.caFile == "/etc/ssl/ca.pem")
        #expect(mqtt.certificateFile == "/etc/vigil/gw.crt")
        #expect(mqtt.keyFile == "/etc/vigil/gw.key")
        #expect(mqtt.keepAlive == 20)
        #expect(mqtt.outboxLimit == 50)
        #expect(mqtt.outboxSize == 4096)
    }

    @Test(arguments: [
        ("[mqtt]\nbroker = \"http://x:1\"\n", "mqtt.broker"),
        ("[mqtt]\nbrokr = \"tcp://x:1\"\n", "mqtt.brokr"),
        ("[mqtt]\nkeepalive = 1\n", "mqtt.keepalive"),
        ("[mqtt]\ncert-file = \"a.crt\"\n", "mqtt.cert-file"),
        ("[mqtt]\noutbox-limit = 0\n", "mqtt.outbox-limit"),
    ])
    func badKeysAreRefusedByName(text: String, field: String) throws {
        let found = try #require(problem(text))
        #expect("\(found)".contains(field) || found.field == field, "\(found)")
    }

    @Test func remoteNotificationNeedsTopicsAndTopicsNeedTheMode() throws {
        let base = "id = \"org.example.push\"\nexec = [\"/bin/true\"]\n"
        let manifest = try AppManifest.parse(
            base + "background-modes = [\"remote-notification\"]\nmqtt-topics = [\"fleet/+/cmd\", \"fleet/all/#\"]\n", file: "m.toml")
        #expect(manifest.mqttTopics == ["fleet/+/cmd", "fleet/all/#"])
        #expect(manifest.mayBeWoken(for: BackgroundMode(wakingFor: "mqtt.message")))
        #expect(throws: ManifestProblem.self) { try AppManifest.parse(base + "mqtt-topics = [\"a\"]\n", file: "m.toml") }
        #expect(throws: ManifestProblem.self) {
            try AppManifest.parse(base + "background-modes = [\"remote-notification\"]\n", file: "m.toml")
        }
        #expect(throws: ManifestProblem.self) {
            try AppManifest.parse(base + "background-modes = [\"remote-notification\"]\nmqtt-topics = [\"a/#/b\"]\n", file: "m.toml")
        }
    }
}
