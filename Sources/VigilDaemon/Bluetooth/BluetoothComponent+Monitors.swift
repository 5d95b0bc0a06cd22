import VigilBluetooth
import VigilLifecycle
import VigilProtocol

/// What the component counts of one client's monitor: advertisements
/// delivered (queued for an app, pushed to vigilctl), and dropped because an
/// app fell behind, of which `unreported` are not yet told to the app.
struct MonitorDeliveries {
    var delivered = 0
    var lost = 0
    var unreported = 0
}

/// Advertisement monitors (`ble.monitor.*`): requests, and every advertisement
/// of a found device delivered as data.
///
/// For apps the advertisements of a monitor are one stream, batched the way
/// notifications are (`BluetoothComponent+Notifications`): one event in
/// flight, later records appended to the next unsent event (up to
/// `maxAdvertisementEventBytes`), so a suspended app is woken once per batch,
/// not per advertisement. The bound: the records in an app's queue (sent and
/// not acknowledged, or unsent) stay within the config's
/// `advertisement-buffer-limit` (1 MiB by default: some 25,000 advertisements
/// of a typical sensor); an advertisement past it is dropped and counted,
/// and the next event queued says how many were dropped (`lost`). Nothing
/// is dropped silently.
extension BluetoothComponent {
    static let monitorRequests: Set<String> = [StartMonitor.type, StopMonitor.type, ListMonitors.type]
    /// The stream all of an app's advertisement events belong to.
    static let advertisementStream = MonitorEventKind.advertisements
    static let maxAdvertisementEventBytes = 64 << 10

    func handleMonitorRequest<S: DaemonServices>(
        _ message: IncomingMessage, _ central: BluetoothCentral, client: BluetoothClient, connection: ClientConnection,
        services: isolated S
    ) throws(ProtocolError) {
        let id = message.id
        switch message.type {
        case StartMonitor.type:
            let request: StartMonitor = try message.decode()
            let outcome: ProtocolError? = central.assumeIsolated { central in
                do throws(ProtocolError) { try central.startMonitor(client, request) } catch { return error }
                return nil
            }
            if let outcome { throw ProtocolError(outcome.code, outcome.message, id: id) }
            monitorDeliveries[client, default: [:]][request.monitor] = monitorDeliveries[client]?[request.monitor] ?? MonitorDeliveries()
            services.send(Done(), id: id, to: connection)
        case StopMonitor.type:
            let request: StopMonitor = try message.decode()
            central.assumeIsolated { $0.stopMonitor(client, name: request.monitor) }
            monitorDeliveries[client]?[request.monitor] = nil
            services.send(Done(), id: id, to: connection)
        case ListMonitors.type:
            var monitors = central.assumeIsolated { $0.monitors(of: client) }
            for index in monitors.indices {
                let counts = monitorDeliveries[client]?[monitors[index].monitor] ?? MonitorDeliveries()
                monitors[index].delivered = counts.delivered
                monitors[index].lost = counts.lost
            }
            services.send(MonitorList(monitors: monitors), id: id, to: connection)
        default:
            throw ProtocolError(.unknownMessage, "unknown Bluetooth request '\(message.type)'", id: id)
        }
    }

    /// A client ended without keeping its Bluetooth use: its counts go too.
    func forgetMonitorDeliveries(of client: BluetoothClient) {
        monitorDeliveries[client] = nil
    }

    func deliverAdvertisement<S: DaemonServices>(
        _ record: AdvertisementRecord, monitor: String, to client: BluetoothClient, services: isolated S
    ) {
        let attributes: [String: JSONValue] = ["monitor": .string(monitor), "framing": .string(AdvertisementRecords.framing)]
        switch client {
        case let .control(connectionID):
            guard let connection = services.connection(connectionID) else { return }
            services.send(BluetoothPush(kind: MonitorEventKind.advertisements, attributes: attributes), body: AdvertisementRecords.encode([record]), to: connection)
            monitorDeliveries[client, default: [:]][monitor, default: MonitorDeliveries()].delivered += 1
        case let .app(app):
            var counts = monitorDeliveries[client]?[monitor] ?? MonitorDeliveries()
            let queued: Bool = services.withEngine { engine, now in
                queueAdvertisement(
                    record, monitor: monitor, unreported: counts.unreported, for: app, limit: services.config.advertisementBufferLimit,
                    engine: engine, now: now)
            }
            if queued {
                counts.delivered += 1
                counts.unreported = 0
            } else {
                if counts.unreported == 0 {
                    services.logger.warning(
                        "bluetooth: \(app) fell behind on monitor '\(monitor)': dropping advertisements until it catches up",
                        metadata: ["app": "\(app)"])
                }
                counts.lost += 1
                counts.unreported += 1
            }
            monitorDeliveries[client, default: [:]][monitor] = counts
        }
    }

    /// Appends the record to the app's last unsent event of the same monitor
    /// if it has room (and no loss is waiting to be reported), else queues a
    /// new event, while the app's queued records stay within `limit` bytes. False: dropped.
    private func queueAdvertisement(
        _ record: AdvertisementRecord, monitor: String, unreported: Int, for app: String, limit: Int, engine: LifecycleEngine,
        now: UInt64
    ) -> Bool {
        var bytes: [UInt8] = []
        AdvertisementRecords.append(record, to: &bytes)
        let queued = engine.queuedEvents(of: app)
        let buffered = queued.lazy.filter { $0.stream == Self.advertisementStream }.reduce(0) { $0 + $1.payload.count }
        guard buffered + bytes.count <= limit else { return false }
        if unreported == 0, let last = queued.last, last.stream == Self.advertisementStream,
           last.attributes["monitor"] == .string(monitor),
           last.payload.count + bytes.count <= min(limit, Self.maxAdvertisementEventBytes),
           engine.merge(bytes, into: app, if: { $0.seq == last.seq }, now: now) != nil {
            return true
        }
        var attributes: [String: JSONValue] = ["monitor": .string(monitor), "framing": .string(AdvertisementRecords.framing)]
        if unreported > 0 { attributes["lost"] = .number(Double(unreported)) }
        let event = QueuedEvent(
            kind: MonitorEventKind.advertisements, attributes: attributes, payload: bytes, wakeMode: .bluetoothCentral,
            stream: Self.advertisementStream)
        do {
            _ = try engine.deliver(event, to: app, now: now)
            return true
        } catch {
            return false
        }
    }
}
