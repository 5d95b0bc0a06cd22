import Testing
import VigilMQTT

/// The receive thread finds Paho's socket by the broker's port
/// (MQTTConnection, docs/fleet.md "Threads and wake-ups").
@Suite("The broker's port from its URI")
struct BrokerPortTests {
    @Test func portsFromURIs() {
        #expect(MQTTConnection.port(of: "tcp://127.0.0.1:41883") == 41883)
        #expect(MQTTConnection.port(of: "mqtts://broker.example.net:8884") == 8884)
        #expect(MQTTConnection.port(of: "tcp://[::1]:1884") == 1884)
        #expect(MQTTConnection.port(of: "ws://broker.example.net:9001/mqtt") == 9001)
        #expect(MQTTConnection.port(of: "tcp://broker.example.net") == 1883)
        #expect(MQTTConnection.port(of: "ssl://broker.example.net") == 8883)
        #expect(MQTTConnection.port(of: "mqtts://[::1]") == 8883)
    }
}
