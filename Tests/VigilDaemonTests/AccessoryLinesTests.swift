import Glibc
import Testing
import VigilAccessories
import VigilProtocol
import VigilSerial
import VigilSystem
@testable import VigilDaemon

/// Serial line control in the accessory component, in-process, on a session
/// whose accessory is a pty (found as udev would report it): the requests'
/// answers, the line settings on the open port, and a break answered when its
/// loop timer ends it (a bare pty takes TIOCSBRK; umockdev's does not).
@Suite struct AccessoryLinesTests {
    static let rig = "org.example.rig"

    func withRigSession(
        lineSettings: String, _ body: (FakeServices, Int) async throws -> Void
    ) async throws {
        let pty = try PseudoTerminal.open()
        defer { pty.close() }
        try await withLoop(named: "lines-test") { loop, directory in
            let services = FakeServices(loop: loop, stateDirectory: directory, bufferLimit: 64 * 1024)
            let (ours, theirs) = try UnixStream.pair()
            defer { theirs.close() }
            let session = try await services.run { services in
                let accessories = AccessoriesComponent(portKeeperCommand: nil)
                services.components = [StreamSessions(), accessories]
                let connection = ClientConnection(
                    id: 1, stream: ours, credentials: PeerCredentials(pid: getpid(), uid: getuid(), gid: getgid()), limits: .default)
                services.connections[1] = connection
                let accessory = try #require(accessories.registry.added(DeviceObservation(
                    sysPath: "/sys/devices/virtual/tty/rig0", devNode: pty.devicePath,
                    properties: ["VIGIL_ACCESSORY": "1", "VIGIL_PROTOCOLS": Self.rig])))
                let opened = try accessories.openSession(
                    OpenSession(connectionID: accessory.info.connectionID, protocol: Self.rig, lineSettings: lineSettings),
                    holder: .control(1), services: services)
                return opened.session
            }
            try await body(services, session)
            await services.run { services in
                services.component(StreamSessions.self)?.end(session, reason: "test over", willReopen: false, notify: false, services: services)
                services.connections[1]?.stream.close()
            }
        }
    }

    /// What the component answers a request: the error it throws, if any.
    func request(_ type: String, _ fields: String, services: FakeServices) async throws -> ProtocolError? {
        let message = try ComponentTests.message(type, fields: fields)
        return await services.run { services -> ProtocolError? in
            let accessories = services.component(AccessoriesComponent.self)!
            let connection = services.connections[1]!
            do throws(ProtocolError) {
                try accessories.handle(message, from: .control(connection: 1), on: connection, services: services)
                return nil
            } catch {
                return error
            }
        }
    }

    func replies(_ services: FakeServices) async -> [String] {
        await services.run { $0.frames.filter { $0.connection == 1 && $0.text.contains("\"id\":7") }.map(\.text) }
    }

    @Test func aBreakIsAnsweredWhenItsTimerEndsIt() async throws {
        try await withRigSession(lineSettings: "115200 8N1") { services, session in
            // Long enough that the checks below run within it; on a machine
            // so loaded that they did not, what they check cannot be seen.
            let length = 1500
            let started = MonotonicInstant.now()
            let accepted = try await request(SendBreak.type, "\"session\":\(session),\"milliseconds\":\(length)", services: services)
            #expect(accepted == nil)
            let early = await replies(services)
            // One break at a time.
            let second = try await request(SendBreak.type, "\"session\":\(session),\"milliseconds\":10", services: services)
            if MonotonicInstant.now() < started.advanced(by: .milliseconds(length)) {
                #expect(early.isEmpty, "answered before the break ended")
                #expect(second?.code == .invalidState)
            }
            var answered: [String] = []
            while answered.isEmpty, MonotonicInstant.now() < started.advanced(by: .milliseconds(length + 5000)) {
                try await Task.sleep(for: .milliseconds(10))
                answered = await replies(services)
            }
            let elapsed = MonotonicInstant.now().nanoseconds - started.nanoseconds
            #expect(answered.first?.contains("\"type\":\"reply\"") == true, "\(answered)")
            #expect(elapsed >= UInt64(length) * 1_000_000, "answered after \(elapsed) ns")
            var ended = false
            while !ended, MonotonicInstant.now() < started.advanced(by: .milliseconds(length + 5000)) {
                ended = await services.run { $0.component(AccessoriesComponent.self)!.breaks.isEmpty }
                if !ended { try await Task.sleep(for: .milliseconds(10)) }
            }
            #expect(ended)
        }
    }

    @Test func aSessionEndingDuringABreakAnswersIt() async throws {
        try await withRigSession(lineSettings: "115200 8N1") { services, session in
            let accepted = try await request(SendBreak.type, "\"session\":\(session),\"milliseconds\":5000", services: services)
            #expect(accepted == nil)
            await services.run { services in
                services.component(StreamSessions.self)?.end(session, reason: "unplugged", willReopen: false, notify: false, services: services)
            }
            let answered = await replies(services)
            #expect(answered.count == 1 && answered[0].contains("invalidState") && answered[0].contains("ended during the break"), "\(answered)")
        }
    }

    @Test func aPtyAnswersNotSupportedAndTheSettingsReachThePort() async throws {
        try await withRigSession(lineSettings: "74880 8N1 nohupcl") { services, session in
            let lines = try await request(SetSessionLines.type, "\"session\":\(session),\"dtr\":false", services: services)
            #expect(lines?.code == .notSupported && lines?.message.contains("TIOCMGET") == true, "\(String(describing: lines))")
            let watch = try await request(WatchSessionLines.type, "\"session\":\(session),\"enabled\":true,\"wake\":true", services: services)
            #expect(watch?.code == .notSupported)
            #expect(await services.run { $0.component(AccessoriesComponent.self)!.lineWatches.isEmpty })
            let rs485 = try await request(SetSessionRS485.type, "\"session\":\(session),\"rs485\":{\"enabled\":true}", services: services)
            #expect(rs485?.code == .notSupported && rs485?.message.contains("TIOCSRS485") == true)
            let other = try await request(SetSessionLines.type, "\"session\":\(session + 1)", services: services)
            #expect(other?.code == .invalidArgument)
            let interval = try await request(WatchSessionLines.type, "\"session\":\(session),\"enabled\":true,\"intervalMilliseconds\":1", services: services)
            #expect(interval?.code == .notSupported, "the driver is asked first")
            // The line settings are on the port: a BOTHER rate and HUPCL cleared.
            let (rate, hangsUp) = try await services.run { services in
                let port = try #require(services.component(AccessoriesComponent.self)!.ports[session]?.port)
                return (try port.currentSettings()?.baudRate, try port.hangsUpOnClose())
            }
            #expect(rate == 74880)
            #expect(!hangsUp)
        }
    }
}
