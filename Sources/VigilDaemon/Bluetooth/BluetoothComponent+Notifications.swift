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
                refused = queueNotifications(values[...], of: path, for: app, engine: engine, now: now)
            }
            if let refused {
                // A full queue: counted, logged and reported to the app as an overflow by the engine.
                services.logger.warning("bluetooth: \(refused.count) value(s) of \(path.characteristic) for \(app) not queued: \(refused.error)", metadata: ["app": "\(app)"])
            }
        }
    }

    /// Queues `values` for `app`, in order: as many as fit appended to its
    /// last event if that is a notification event not yet sent, the rest as
    /// new events of as many values as fit in one (all of a read of the
    /// socket in one event, not one event for the first and one for the
    /// rest when the first goes out at once). Returns how many could not be
    /// queued and why (a full queue: dropped and counted), or nil.
    private func queueNotifications(
        _ values: ArraySlice<[UInt8]>, of path: CharacteristicPath, for app: String, engine: LifecycleEngine, now: UInt64
    ) -> (count: Int, error: ProtocolError)? {
        var rest = values
        if let last = engine.queuedEvents(of: app).last, last.stream == Self.notificationStream,
           NotificationValues.isFramed(last.attributes),
           case let .notification(eventPath)? = try? BluetoothEventContent(kind: last.kind, attributes: last.attributes) {
            let (records, taken) = Self.records(of: rest, of: path, in: eventPath, room: Self.maxNotificationEventBytes - last.payload.count)
            // `merge` takes them only while that event is unsent (and still the last).
            if taken > 0, engine.merge(records, into: app, if: { $0.seq == last.seq }, now: now) != nil {
                rest = rest.dropFirst(taken)
            }
        }
        while !rest.isEmpty {
            // At least one value per event, whatever its length.
            let (records, taken) = Self.records(of: rest, of: path, in: path, room: Self.maxNotificationEventBytes, atLeastOne: true)
            let event = QueuedEvent(
                kind: BluetoothEventKind.notification, attributes: NotificationValues.attributes(of: path),
                payload: records, wakeMode: .bluetoothCentral, stream: Self.notificationStream)
            do throws(ProtocolError) {
                _ = try engine.deliver(event, to: app, now: now)
            } catch {
                return (rest.count, error)
            }
            rest = rest.dropFirst(taken)
        }
        return nil
    }

    /// The records of the first of `values` that fit in `room` bytes, and how many that is.
    private static func records(
        of values: ArraySlice<[UInt8]>, of path: CharacteristicPath, in eventPath: CharacteristicPath, room: Int,
        atLeastOne: Bool = false
    ) -> (records: [UInt8], taken: Int) {
        var records: [UInt8] = []
        var taken = 0
        for value in values {
            let before = records.count
            NotificationValues.append(value, of: path, in: eventPath, to: &records)
            if records.count > room && !(atLeastOne && taken == 0) {
                records.removeSubrange(before...)
                break
            }
            taken += 1
        }
        return (records, taken)
    }
}
