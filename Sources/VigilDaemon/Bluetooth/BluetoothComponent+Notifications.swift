import VigilBluetooth
import VigilLifecycle
import VigilProtocol

/// Notifications of subscribed characteristics: pushed one by one to
/// control clients; queued for apps as batches.
///
/// All of an app's `ble.notification` events form one stream (see
/// `QueuedEvent.stream`): one of them is in flight at a time, and values that
/// arrive meanwhile are appended to the next one, which waits for the
/// acknowledgement of the one before. So a slow or suspended app costs the
/// daemon one event (journal record, frame, acknowledgement, wake) per batch
/// rather than per value, and a burst cannot overflow the app's queue. Values
/// are framed (`NotificationValues`, docs/protocol.md), in arrival order,
/// whatever their characteristic; at low rates every event holds one value and
/// goes out at once, as before. Merged values are journaled like any event, so
/// a SIGKILL of vigild loses none that it had queued.
extension BluetoothComponent {
    /// The stream every notification event of an app belongs to.
    static let notificationStream = BluetoothEventKind.notification
    /// The most value bytes (records included) one event carries; more go in the next.
    static let maxNotificationEventBytes = 64 << 10

    func deliverNotifications<S: DaemonServices>(
        _ values: [[UInt8]], of path: CharacteristicPath, to client: BluetoothClient, services: isolated S
    ) {
        switch client {
        case let .control(connectionID):
            guard let connection = services.connection(connectionID) else { return }
            let push = BluetoothPush(kind: BluetoothEventKind.notification, attributes: BluetoothEventContent.notification(path).attributes)
            for value in values {
                services.send(push, body: value, to: connection)
            }
        case let .app(app):
            // One engine call (one journal write, one routing) for all of them.
            var refused: (count: Int, error: ProtocolError)?
            services.withEngine { engine, now in
                for value in values {
                    do throws(ProtocolError) {
                        try queueNotification(value, of: path, for: app, engine: engine, now: now)
                    } catch {
                        refused = ((refused?.count ?? 0) + 1, refused?.error ?? error)
                    }
                }
            }
            if let refused {
                // A full queue: counted, logged and reported to the app as an overflow by the engine.
                services.logger.warning("bluetooth: \(refused.count) value(s) of \(path.characteristic) for \(app) not queued: \(refused.error)", metadata: ["app": "\(app)"])
            }
        }
    }

    /// Queues one value for `app`: appended to its last event if that is a
    /// notification event not yet sent with room left, else as a new event.
    /// Throws when it cannot be queued (a full queue: dropped and counted).
    private func queueNotification(
        _ value: [UInt8], of path: CharacteristicPath, for app: String, engine: LifecycleEngine, now: UInt64
    ) throws(ProtocolError) {
        if let last = engine.queuedEvents(of: app).last, last.stream == Self.notificationStream,
           NotificationValues.isFramed(last.attributes),
           case let .notification(eventPath)? = try? BluetoothEventContent(kind: last.kind, attributes: last.attributes) {
            let record = NotificationValues.record(value, of: path, in: eventPath)
            // `merge` takes it only while that event is unsent (and still the last).
            if last.payload.count + record.count <= Self.maxNotificationEventBytes,
               engine.merge(record, into: app, if: { $0.seq == last.seq }, now: now) != nil {
                return
            }
        }
        let event = QueuedEvent(
            kind: BluetoothEventKind.notification, attributes: NotificationValues.attributes(of: path),
            payload: NotificationValues.record(value, of: path, in: path), wakeMode: .bluetoothCentral,
            stream: Self.notificationStream)
        _ = try engine.deliver(event, to: app, now: now)
    }
}
