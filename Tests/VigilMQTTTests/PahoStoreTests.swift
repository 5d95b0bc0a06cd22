import Foundation
import Testing
import VigilMQTT

private let brokerInstalled = FileManager.default.isExecutableFile(atPath: "/usr/sbin/mosquitto")
    && FileManager.default.isExecutableFile(atPath: "/usr/bin/mosquitto_pub")

/// The property vigild's push wakes rest on (docs/fleet.md, "Design notes"):
/// Paho stores a QoS 1 message in our store before it acknowledges it to the
/// broker, keeps it while `onMessage` refuses it, and a new client on the
/// same store gets it again although the broker will never resend it.
/// Needs Debian's `mosquitto` and `mosquitto-clients` (scripts/setup).
@Suite("Paho's store with a real Mosquitto", .enabled(if: brokerInstalled))
struct PahoStoreTests {

    final class Received: @unchecked Sendable {
        private let lock = NSLock()
        private var messages: [MQTTIncoming] = []
        private var connectedCount = 0
        func add(_ message: MQTTIncoming) { lock.withLock { messages.append(message) } }
        func connected() { lock.withLock { connectedCount += 1 } }
        var all: [MQTTIncoming] { lock.withLock { messages } }
        var connections: Int { lock.withLock { connectedCount } }
    }

    func waitUntil(_ seconds: Double = 20, _ condition: () -> Bool) -> Bool {
        let deadline = Date(timeIntervalSinceNow: seconds)
        while Date() < deadline {
            if condition() { return true }
            usleep(10_000)
        }
        return condition()
    }

    func run(_ arguments: [String]) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: arguments[0])
        process.arguments = Array(arguments.dropFirst())
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        return process
    }

    @Test func aRefusedMessageIsStoredAcknowledgedAndOfferedToTheNextClient() throws {
        let folder = NSTemporaryDirectory() + "vigil-paho-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let socket = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in(sin_family: sa_family_t(AF_INET), sin_port: 0, sin_addr: in_addr(s_addr: inet_addr("127.0.0.1")), sin_zero: (0, 0, 0, 0, 0, 0, 0, 0))
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(socket, $0, length) } }
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(socket, $0, &length) } }
        let port = Int(UInt16(bigEndian: address.sin_port))
        close(socket)
        try "listener \(port) 127.0.0.1\nallow_anonymous true\n".write(toFile: folder + "/m.conf", atomically: true, encoding: .utf8)
        let broker = try run(["/usr/sbin/mosquitto", "-c", folder + "/m.conf"])
        defer { kill(broker.processIdentifier, SIGKILL); broker.waitUntilExit() }

        let options = MQTTClientOptions(
            serverURI: "tcp://127.0.0.1:\(port)", clientID: "vigil-paho-test-\(getpid())", storeDirectory: folder + "/store", sync: true)
        let first = Received()
        let refusing = try MQTTConnection(
            options: options, onEvent: { if case .connected = $0 { first.connected() } },
            onMessage: { first.add($0); return false })
        refusing.subscribe(to: ["paho-test/#"])
        refusing.start()
        #expect(waitUntil { first.connections == 1 })
        // Published until the subscription is in place (its SUBACK may come after CONNACK).
        #expect(waitUntil {
            let publisher = try? run(["/usr/bin/mosquitto_pub", "-p", "\(port)", "-q", "1", "-t", "paho-test/a", "-m", "kept"])
            publisher?.waitUntilExit()
            return waitUntil(1) { !first.all.isEmpty }
        })
        let stored = { (try? FileManager.default.contentsOfDirectory(atPath: folder + "/store").filter { $0.hasPrefix("q") }) ?? [] }
        #expect(waitUntil { !stored().isEmpty }, "Paho stored the refused message")
        refusing.stop()

        let second = Received()
        let accepting = try MQTTConnection(
            options: options, onEvent: { if case .connected = $0 { second.connected() } },
            onMessage: { second.add($0); return true })
        accepting.subscribe(to: ["paho-test/#"])
        accepting.start()
        defer { accepting.stop() }
        #expect(waitUntil { second.all.contains { $0.payload == Array("kept".utf8) } }, "offered again from the store")
        #expect(second.all.first?.topic == "paho-test/a")
        #expect(waitUntil { stored().isEmpty }, "deleted once accepted")
    }
}
