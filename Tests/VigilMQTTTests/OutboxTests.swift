import Foundation
import Testing
import VigilMQTT

@Suite("MQTT outbox")
struct OutboxTests {
    func folder() -> String {
        let path = NSTemporaryDirectory() + "vigil-outbox-\(UUID().uuidString)"
        return path
    }

    @Test func messagesSurviveAReopenInOrderUntilRemoved() throws {
        let path = folder()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let outbox = try MQTTSpool(name: "outbox", directory: path, sync: true, messageLimit: 10, byteLimit: 1 << 20)
        let first = try outbox.append(app: "org.example.a", topic: "t/1", payload: [1, 2, 3])
        let second = try outbox.append(app: "org.example.a", topic: "t/2", payload: [])
        let third = try outbox.append(app: "org.example.b", topic: "t/3", payload: Array("x".utf8))
        #expect(first.seq < second.seq && second.seq < third.seq)
        outbox.remove(second.seq)
        let reopened = try MQTTSpool(name: "outbox", directory: path, sync: false, messageLimit: 10, byteLimit: 1 << 20)
        #expect(reopened.entries == [first, third])
        #expect(reopened.bytes == first.size + third.size)
        let fourth = try reopened.append(app: "org.example.a", topic: "t/4", payload: [4])
        #expect(fourth.seq > third.seq)
    }

    @Test func theBoundsRefuseAndCount() throws {
        let path = folder()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let outbox = try MQTTSpool(name: "outbox", directory: path, sync: false, messageLimit: 2, byteLimit: 1 << 20)
        _ = try outbox.append(app: "a.b", topic: "t", payload: [1])
        _ = try outbox.append(app: "a.b", topic: "t", payload: [2])
        #expect(throws: MQTTSpool.Refusal.self) { try outbox.append(app: "a.b", topic: "t", payload: [3]) }
        #expect(outbox.refused == 1)
        let small = try MQTTSpool(name: "outbox", directory: path + "-b", sync: false, messageLimit: 100, byteLimit: 10)
        defer { try? FileManager.default.removeItem(atPath: path + "-b") }
        #expect(throws: MQTTSpool.Refusal.self) { try small.append(app: "a.b", topic: "t", payload: [UInt8](repeating: 0, count: 20)) }
    }
}
