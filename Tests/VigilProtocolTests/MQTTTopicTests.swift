import Testing
import VigilProtocol

@Suite("MQTT topics")
struct TopicTests {
    @Test func wildcardsMatchAsMQTTSays() {
        #expect(MQTTTopic.matches(filter: "fleet/+/cmd", topic: "fleet/gw1/cmd"))
        #expect(!MQTTTopic.matches(filter: "fleet/+/cmd", topic: "fleet/gw1/x/cmd"))
        #expect(MQTTTopic.matches(filter: "fleet/#", topic: "fleet"))
        #expect(MQTTTopic.matches(filter: "fleet/#", topic: "fleet/a/b"))
        #expect(MQTTTopic.matches(filter: "a/b", topic: "a/b"))
        #expect(!MQTTTopic.matches(filter: "a/b", topic: "a/b/c"))
        #expect(!MQTTTopic.matches(filter: "a/b/c", topic: "a/b"))
        #expect(!MQTTTopic.matches(filter: "#", topic: "$SYS/uptime"))
        #expect(MQTTTopic.matches(filter: "+/+", topic: "/x"))
    }

    @Test func badFiltersAndTopicsAreRefused() {
        #expect(MQTTTopic.problem(filter: "a/#/b") != nil)
        #expect(MQTTTopic.problem(filter: "a/b#") != nil)
        #expect(MQTTTopic.problem(filter: "a+/b") != nil)
        #expect(MQTTTopic.problem(filter: "") != nil)
        #expect(MQTTTopic.problem(filter: "a/+/#") == nil)
        #expect(MQTTTopic.problem(topic: "a/+") != nil)
        #expect(MQTTTopic.problem(topic: "a/b") == nil)
    }
}
