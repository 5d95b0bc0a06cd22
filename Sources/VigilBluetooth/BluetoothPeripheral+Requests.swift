import VigilDBus
import VigilProtocol
import VigilSystem

/// Requests from remote centrals, as bluetoothd forwards them to our objects,
/// and the clients' answers and value updates.
extension BluetoothPeripheral {
    /// A call on one of our characteristics (on the loop, from the bus's dispatch).
    func characteristicCall(_ call: DBusMethodCall, client: BluetoothClient, service: PublishedService) {
        guard let characteristic = service.characteristics[call.path] else { return call.replyUnknownMethod() }
        let options = call.arguments.last?.dictionaryStringVariant ?? [:]
        let offset = Int(options["offset"]?.unwrapped.uint16 ?? 0)
        let central = centralAddress(options["device"]?.unwrapped.objectPath)
        let (serviceUUID, uuid) = (characteristic.service, characteristic.uuid)
        switch call.member {
        case "ReadValue":
            if let value = characteristic.fixedValue { return Self.answerFixedRead(call, value) }
            guard characteristic.flags.contains(where: { $0 == "read" || $0.hasSuffix("-read") }) else {
                return call.replyError(name: "org.bluez.Error.NotPermitted", message: "not readable")
            }
            forward(call, isRead: true, body: [], to: client) { request in
                .read(request: request, service: serviceUUID, characteristic: uuid, offset: offset, central: central)
            }
        case "WriteValue":
            guard let value = call.arguments.first?.bytes else {
                return call.replyError(name: "org.bluez.Error.InvalidArguments", message: "WriteValue needs a byte array")
            }
            if options["type"]?.unwrapped.string == "command" {
                // Without response: nobody waits; the app gets the value.
                try? call.reply()
                emit(.write(request: nil, service: serviceUUID, characteristic: uuid, offset: offset, central: central), body: value, to: client)
            } else {
                forward(call, isRead: false, body: value, to: client) { request in
                    .write(request: request, service: serviceUUID, characteristic: uuid, offset: offset, central: central)
                }
            }
        case "StartNotify":
            try? call.reply()
            guard service.characteristics[call.path]?.notifying == false else { return }
            service.characteristics[call.path]?.notifying = true
            emit(.subscribed(service: serviceUUID, characteristic: uuid), to: client)
        case "StopNotify":
            try? call.reply()
            guard service.characteristics[call.path]?.notifying == true else { return }
            service.characteristics[call.path]?.notifying = false
            emit(.unsubscribed(service: serviceUUID, characteristic: uuid), to: client)
        default:
            call.replyUnknownMethod()
        }
    }

    static func answerFixedRead(_ call: DBusMethodCall, _ value: [UInt8]) {
        guard call.member == "ReadValue" else { return call.replyUnknownMethod() }
        let options = call.arguments.last?.dictionaryStringVariant ?? [:]
        let offset = Int(options["offset"]?.unwrapped.uint16 ?? 0)
        guard offset <= value.count else {
            return call.replyError(name: "org.bluez.Error.InvalidOffset", message: "offset \(offset) beyond the value's \(value.count) bytes")
        }
        try? call.reply([.bytes(Array(value[offset...]))])
    }

    /// Hands a read or a write with response to the client and arms the
    /// timeout that answers BlueZ with an error if the client does not.
    private func forward(
        _ call: DBusMethodCall, isRead: Bool, body: [UInt8], to client: BluetoothClient,
        event: (Int) -> PeripheralEventContent
    ) {
        let id = nextRequestID
        nextRequestID += 1
        let timeout = requestTimeout
        let timer = loop.schedule(after: timeout) { [weak self] in
            self?.assumeIsolated { peripheral in
                guard let request = peripheral.pending.removeValue(forKey: id) else { return }
                peripheral.log("bluetooth: \(client) did not answer request \(id) within \(timeout); the central gets an error")
                request.call.replyError(name: "org.bluez.Error.Failed", message: "the app did not answer in time")
            }
        }
        pending[id] = PendingRequest(client: client, call: call, isRead: isRead, timer: timer)
        emit(event(id), body: body, to: client)
    }

    /// Fails requests waiting on a characteristic that goes away.
    func failPending(on path: ObjectPath) {
        for (id, request) in pending where request.call.path == path {
            loop.cancelTimer(request.timer)
            request.call.replyError(name: "org.bluez.Error.Failed", message: "the service was withdrawn")
            pending[id] = nil
        }
    }

    public func respond(_ client: BluetoothClient, request id: Int, value: [UInt8], error: String?) throws(ProtocolError) {
        guard let request = pending[id], request.client == client else {
            throw ProtocolError(.notFound, "no request \(id) is waiting for this client's answer (answered, or timed out)")
        }
        pending[id] = nil
        loop.cancelTimer(request.timer)
        if let error {
            guard let att = ATTError(rawValue: error) else {
                request.call.replyError(name: "org.bluez.Error.Failed", message: "unknown error \(error)")
                throw ProtocolError(.invalidArgument, "'\(error)' is not an ATT error (\(ATTError.allCases.map(\.rawValue).joined(separator: ", ")))")
            }
            request.call.replyError(name: Self.bluezError(att, read: request.isRead), message: att.rawValue)
        } else {
            try? request.call.reply(request.isRead ? [.bytes(value)] : [])
        }
    }

    /// BlueZ's gatt-database turns these D-Bus errors into the ATT errors.
    static func bluezError(_ error: ATTError, read: Bool) -> String {
        switch error {
        case .readNotPermitted, .writeNotPermitted: "org.bluez.Error.NotPermitted"
        case .invalidOffset: "org.bluez.Error.InvalidOffset"
        case .invalidAttributeValueLength: "org.bluez.Error.InvalidValueLength"
        case .insufficientAuthentication, .insufficientAuthorization: "org.bluez.Error.NotAuthorized"
        case .requestNotSupported: "org.bluez.Error.NotSupported"
        case .unlikelyError: "org.bluez.Error.Failed"
        }
    }

    /// Sends a new value to subscribed centrals (PropertiesChanged of Value,
    /// which bluetoothd turns into notifications). `sent` false when the bus
    /// connection's outgoing queue is long: the client is told
    /// `readyToUpdate` once it drained, as CoreBluetooth does.
    public func updateValue(_ client: BluetoothClient, service: String, characteristic: String, value: [UInt8]) throws(ProtocolError) -> ValueUpdated {
        guard let serviceUUID = BluetoothUUID.normalize(service), let uuid = BluetoothUUID.normalize(characteristic) else {
            throw ProtocolError(.invalidArgument, "'\(service)' / '\(characteristic)' are not Bluetooth UUIDs")
        }
        guard let published = clients[client]?.services.first(where: { $0.definition.uuid == serviceUUID }),
              let (path, state) = published.characteristics.first(where: { $0.value.uuid == uuid }) else {
            throw ProtocolError(.notFound, "this client publishes no characteristic \(BluetoothUUID.short(uuid)) in service \(BluetoothUUID.short(serviceUUID))")
        }
        guard state.flags.contains(where: { $0.contains("notify") || $0.contains("indicate") }) else {
            throw ProtocolError(.notPermitted, "characteristic \(BluetoothUUID.short(uuid)) neither notifies nor indicates")
        }
        guard state.notifying, published.registered, let (bus, _) = blueZNow() else { return ValueUpdated(sent: true, subscribed: false) }
        // Synchronous on the shared loop: updates go out in the order asked.
        let outcome: Result<Bool, DBusError> = bus.assumeIsolated { bus in
            guard bus.outgoingBytes <= Self.queueHigh else { return .success(false) }
            do throws(DBusError) {
                try bus.emitSignal(
                    path: path, interface: BlueZ.properties, member: "PropertiesChanged",
                    arguments: [.string(BlueZ.gattCharacteristic), .stringVariantDictionary(["Value": .bytes(value)]),
                                .array(elementSignature: "s", [])])
                return .success(true)
            } catch {
                return .failure(error)
            }
        }
        switch outcome {
        case .success(true):
            return ValueUpdated(sent: true, subscribed: true)
        case .success(false):
            waitingForRoom.insert(client)
            watchForRoom(bus)
            return ValueUpdated(sent: false, subscribed: true)
        case let .failure(error):
            throw ProtocolError(.unavailable, "the update could not be sent: \(error)")
        }
    }

    static let queueHigh = 256 * 1024
    static let queueLow = 64 * 1024

    private func watchForRoom(_ bus: DBusConnection) {
        guard roomTimer == nil else { return }
        roomTimer = loop.schedule(after: .milliseconds(5)) { [weak self] in
            self?.assumeIsolated { $0.checkRoom(bus) }
        }
    }

    private func checkRoom(_ bus: DBusConnection) {
        roomTimer = nil
        guard bus.assumeIsolated({ $0.outgoingBytes }) <= Self.queueLow else { return watchForRoom(bus) }
        let waiting = waitingForRoom
        waitingForRoom = []
        for client in waiting { emit(.readyToUpdate, to: client) }
    }

    func centralAddress(_ device: ObjectPath?) -> String? {
        guard let device else { return nil }
        if let address = central.assumeIsolated({ $0.tree.device(at: device)?.address }), !address.isEmpty { return address }
        // dev_AA_BB_CC_DD_EE_FF
        guard let last = device.rawValue.split(separator: "/").last, last.hasPrefix("dev_") else { return nil }
        return String(last.dropFirst(4).map { $0 == "_" ? ":" : $0 })
    }
}
