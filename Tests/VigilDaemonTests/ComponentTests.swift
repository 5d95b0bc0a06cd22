import Glibc
import Testing
import VigilConfig
import VigilLifecycle
import VigilProtocol
import VigilSystem
@testable import VigilDaemon

/// Components other than the stream layer, driven in-process through the
/// fake core: the request table, what each says to a client it does not
/// serve, and the summaries and series the core gathers from all of them.
@Suite struct ComponentTests {
    static let app = "org.vigil.test.components"

    /// A running loop and a fake core holding `components`, with one app launched and connected.
    func withServices(
        _ components: @escaping @Sendable () -> [any DaemonComponent], configure: @escaping @Sendable (inout DaemonConfig) -> Void = { _ in },
        _ body: (FakeServices) async throws -> Void
    ) async throws {
        try await withLoop(named: "components-test") { loop, directory in
            let services = FakeServices(loop: loop, stateDirectory: directory, bufferLimit: 64 * 1024, configure: configure)
            try await services.run { services in
                services.components = components()
                try services.launchConnected(Self.app, mode: .externalAccessory)
            }
            try await body(services)
        }
    }

    /// A request as the core hands it to a component.
    static func message(_ type: String, id: Int = 7, fields: String = "") throws -> IncomingMessage {
        let header = "{\"type\":\"\(type)\",\"id\":\(id)\(fields.isEmpty ? "" : "," + fields)}"
        return try IncomingMessage(frame: Frame(header: Array(header.utf8)))
    }

    /// What a component answers `message` from `requester`: the error it throws, if any.
    func error(
        of message: IncomingMessage, from requester: Requester, on services: FakeServices, to component: String
    ) async -> ProtocolError? {
        await services.run { services -> ProtocolError? in
            let (ours, theirs) = try! UnixStream.pair()
            defer { theirs.close() }
            let connection = ClientConnection(
                id: 1, stream: ours, credentials: PeerCredentials(pid: getpid(), uid: getuid(), gid: getgid()), limits: .default)
            defer { connection.stream.close() }
            guard let target = services.components.first(where: { $0.name == component }) else { return nil }
            do throws(ProtocolError) {
                try target.handle(message, from: requester, on: connection, services: services)
                return nil
            } catch {
                return error
            }
        }
    }

    @Test func theRequestTableSendsEachTypeToTheComponentThatListsIt() {
        let routes = DaemonCore.routes(for: [RefreshComponent(), MQTTComponent(), BluetoothComponent()])
        #expect(routes[ScheduleRefresh.type] is RefreshComponent)
        #expect(routes[MQTTPublish.type] is MQTTComponent)
        #expect(routes[StartScan.type] is BluetoothComponent)
        #expect(routes[AddService.type] is BluetoothComponent)
        #expect(routes["status"] == nil)  // the core's own
        #expect(routes.count == RefreshComponent().requestTypes.count + 1 + BluetoothComponent().requestTypes.count)
    }

    @Test func aComponentRefusesTheRoleItDoesNotServe() async throws {
        try await withServices({ [RefreshComponent(), MQTTComponent()] }) { services in
            let refresh = await error(of: try Self.message(ScheduleRefresh.type, fields: "\"interval\":60"),
                                      from: .control(connection: 1), on: services, to: "refresh")
            #expect(refresh?.code == .unknownMessage && refresh?.id == 7)
            let publish = await error(of: try Self.message(MQTTPublish.type, fields: "\"topic\":\"a/b\""),
                                      from: .control(connection: 1), on: services, to: "mqtt")
            #expect(publish?.code == .unknownMessage)
        }
    }

    @Test func mqttPublishWithoutABrokerIsUnavailableAndNamesTheConfig() async throws {
        try await withServices({ [MQTTComponent()] }) { services in
            let failure = await error(of: try Self.message(MQTTPublish.type, fields: "\"topic\":\"a/b\""),
                                      from: .app(Self.app), on: services, to: "mqtt")
            #expect(failure?.code == .unavailable && failure?.message.contains("[mqtt] broker") == true && failure?.id == 7)
        }
    }

    @Test func completingARefreshThatWasNeverScheduledIsAnInvalidState() async throws {
        try await withServices({ [RefreshComponent()] }) { services in
            let failure = await error(of: try Self.message(CompleteRefresh.type, fields: "\"result\":\"newData\""),
                                      from: .app(Self.app), on: services, to: "refresh")
            #expect(failure?.code == .invalidState)
        }
    }

    @Test func bluetoothDisabledByTheConfigAnswersUnavailableAndSaysOff() async throws {
        try await withServices({ [StreamSessions(), BluetoothComponent(), SystemdComponent(link: SystemdLink())] },
                               configure: { $0.bluetooth = false }) { services in
            let (line, health) = try await services.run { services in
                try services.startComponents()
                let line = services.component(SystemdComponent.self)!.statusLine(services: services)
                var status = DaemonStatus(
                    daemon: "test", pid: 1, protocolVersion: 1, socket: "", suspension: .signals, suspensionDetail: "",
                    cgroupRoot: nil, apps: 0, manifestProblems: [], timings: [:], uptime: 0)
                services.component(BluetoothComponent.self)!.addStatus(to: &status, services: services)
                return (line, status.bluetooth)
            }
            // The line is the core's apps, then each component's summary in start order.
            #expect(line == "1 apps (1 running, 0 suspended), 0 sessions, Bluetooth: off")
            #expect(health?.condition == .disabled)
            let failure = await error(of: try Self.message(StartScan.type), from: .app(Self.app), on: services, to: "bluetooth")
            #expect(failure?.code == .unavailable)
        }
    }

    @Test func theMetricsPageHoldsEveryComponentsSeries() async throws {
        let socket = "/tmp/vigil-components-metrics-\(getpid()).sock"
        defer { unlink(socket) }
        try await withServices({ [MetricsComponent(), StreamSessions()] }, configure: { $0.metricsSocket = socket }) { services in
            let page = try await services.run { services in
                try services.startComponents()
                defer { services.component(MetricsComponent.self)!.stopIntake(services: services) }
                return String(decoding: services.component(MetricsComponent.self)!.page(services: services), as: UTF8.self)
            }
            #expect(page.contains("vigil_apps{state=\"active\"} 1"))
            #expect(page.contains("vigil_sessions 0"))  // the stream layer's series
        }
    }
}
