import Glibc
import VigilDBus
import VigilProtocol
import VigilSystem

/// GATT for clients: discovery once BlueZ resolved the tree, reads, writes,
/// and subscriptions that the daemon keeps across reconnects.
extension BluetoothCentral {
    // MARK: Discovery

    public func discoverServices(_ client: BluetoothClient, address rawAddress: String) async throws(ProtocolError) -> [GATTServiceInfo] {
        let address = try Self.address(rawAddress)
        guard let device = tree.device(address: address), device.connected else {
            throw ProtocolError(.notConnected, "\(address) is not connected; connect first")
        }
        if !device.servicesResolved {
            guard await waitForServices(address, timeout: .seconds(30)) else {
                throw ProtocolError(.deviceError, "\(address): BlueZ did not resolve the services within 30 s")
            }
        }
        guard let device = tree.device(address: address) else { throw ProtocolError(.notConnected, "\(address) went away") }
        return services(of: device, for: client)
    }

    func services(of device: DeviceView, for client: BluetoothClient) -> [GATTServiceInfo] {
        let subscribed = clients[client]?.subscriptions ?? [:]
        return tree.services(of: device.path).map { service in
            GATTServiceInfo(
                uuid: service.uuid, primary: service.primary,
                characteristics: tree.characteristics(of: service.path).map { characteristic in
                    GATTCharacteristicInfo(
                        uuid: characteristic.uuid, properties: characteristic.flags,
                        descriptors: tree.descriptors(of: characteristic.path).map { GATTDescriptorInfo(uuid: $0.uuid) },
                        notifying: subscribed[CharacteristicPath(peripheral: device.address, service: service.uuid, characteristic: characteristic.uuid)] != nil)
                })
        }
    }

    private func waitForServices(_ address: String, timeout: Duration) async -> Bool {
        nextWaiterID += 1
        let id = nextWaiterID
        return await withCheckedContinuation { continuation in
            let timer = loop.schedule(after: timeout) { [weak self] in
                self?.assumeIsolated { central in
                    guard let index = central.resolvedWaiters[address]?.firstIndex(where: { $0.id == id }) else { return }
                    central.resolvedWaiters[address]?.remove(at: index).continuation.resume(returning: false)
                }
            }
            resolvedWaiters[address, default: []].append(Waiter(id: id, continuation: continuation, timer: timer))
        }
    }

    // MARK: Reads and writes

    /// The characteristic's object, or a clear error.
    func resolve(_ path: CharacteristicPath) throws(ProtocolError) -> (CharacteristicPath, GattCharacteristicView) {
        let address = try Self.address(path.peripheral)
        guard let service = BluetoothUUID.normalize(path.service), let uuid = BluetoothUUID.normalize(path.characteristic) else {
            throw ProtocolError(.invalidArgument, "'\(path.service)' / '\(path.characteristic)' are not Bluetooth UUIDs")
        }
        let canonical = CharacteristicPath(peripheral: address, service: service, characteristic: uuid)
        guard let device = tree.device(address: address), device.connected else {
            throw ProtocolError(.notConnected, "\(address) is not connected")
        }
        guard let characteristic = tree.characteristic(of: device.path, service: service, characteristic: uuid) else {
            throw ProtocolError(
                .notFound,
                "\(address) has no characteristic \(BluetoothUUID.short(uuid)) in service \(BluetoothUUID.short(service))"
                    + (device.servicesResolved ? "" : " (services not resolved yet: discover first)"))
        }
        return (canonical, characteristic)
    }

    public func read(_ client: BluetoothClient, _ path: CharacteristicPath, descriptor: String? = nil) async throws(ProtocolError) -> [UInt8] {
        let (_, characteristic) = try resolve(path)
        var object = characteristic.path
        var interface = BlueZ.gattCharacteristic
        if let descriptor {
            guard let uuid = BluetoothUUID.normalize(descriptor),
                  let found = tree.descriptors(of: characteristic.path).first(where: { $0.uuid == uuid }) else {
                throw ProtocolError(.notFound, "no descriptor \(descriptor) on that characteristic")
            }
            object = found.path
            interface = BlueZ.gattDescriptor
        }
        let reply = try await bluez(object, interface, "ReadValue", [.stringVariantDictionary([:])])
        guard let value = reply.first?.bytes else { throw ProtocolError(.deviceError, "ReadValue returned no bytes") }
        return value
    }

    public func write(_ client: BluetoothClient, _ path: CharacteristicPath, value: [UInt8], withResponse: Bool) async throws(ProtocolError) {
        let (_, characteristic) = try resolve(path)
        let options: [String: DBusValue] = ["type": .string(withResponse ? "request" : "command")]
        _ = try await bluez(characteristic.path, BlueZ.gattCharacteristic, "WriteValue", [.bytes(value), .stringVariantDictionary(options)])
    }

    /// A call to BlueZ with its errors as protocol errors naming BlueZ's.
    func bluez(_ path: ObjectPath, _ interface: String, _ member: String, _ arguments: [DBusValue]) async throws(ProtocolError) -> [DBusValue] {
        guard let bus, bluezOwner != nil else { throw ProtocolError(.unavailable, "bluetoothd is not running") }
        do {
            return try await bus.call(destination: BlueZ.service, path: path, interface: interface, member: member, arguments: arguments, timeout: .seconds(30))
        } catch let error as DBusError {
            throw ProtocolError(.deviceError, "\(member): \(error.name)\(error.message.isEmpty ? "" : ": " + error.message)")
        } catch {
            throw ProtocolError(.internalError, "\(member): \(error)")
        }
    }

    // MARK: Subscriptions

    /// Subscribes or unsubscribes. The subscription is the client's from now
    /// on: started when the peripheral is connected and resolved, and again
    /// after every reconnect or BlueZ restart.
    public func setNotify(_ client: BluetoothClient, _ path: CharacteristicPath, enabled: Bool, acquire: Bool) throws(ProtocolError) {
        let address = try Self.address(path.peripheral)
        guard let service = BluetoothUUID.normalize(path.service), let uuid = BluetoothUUID.normalize(path.characteristic) else {
            throw ProtocolError(.invalidArgument, "'\(path.service)' / '\(path.characteristic)' are not Bluetooth UUIDs")
        }
        let canonical = CharacteristicPath(peripheral: address, service: service, characteristic: uuid)
        if enabled {
            if clients[client]?.connects.contains(address) != true {
                // Subscribing to a link that is up (another client's) makes it
                // this client's too: the subscription must survive a reconnect.
                guard tree.device(address: address)?.connected == true else {
                    throw ProtocolError(.notConnected, "connect to \(address) before subscribing")
                }
                clients[client, default: CentralClientState()].connects.insert(address)
                clients[client]?.announced.insert(address)
            }
            if let device = tree.device(address: address), device.servicesResolved {
                guard let characteristic = tree.characteristic(of: device.path, service: service, characteristic: uuid) else {
                    throw ProtocolError(.notFound, "\(address) has no characteristic \(BluetoothUUID.short(uuid)) in service \(BluetoothUUID.short(service))")
                }
                guard characteristic.flags.contains("notify") || characteristic.flags.contains("indicate") else {
                    throw ProtocolError(.notPermitted, "characteristic \(BluetoothUUID.short(uuid)) does not notify (flags: \(characteristic.flags.joined(separator: ",")))")
                }
            }
            clients[client]?.subscriptions[canonical] = acquire
        } else {
            clients[client]?.subscriptions[canonical] = nil
        }
        reconcileNotifications(address)
    }

    /// Starts notifications every subscriber needs and stops the ones nobody does.
    func reconcileNotifications(_ address: String) {
        guard bus != nil, bluezOwner != nil, let device = tree.device(address: address), device.connected, device.servicesResolved else { return }
        var wantedPaths: [ObjectPath: Bool] = [:]  // -> acquire (only if every subscriber asked for it)
        for state in clients.values {
            for (path, acquire) in state.subscriptions where path.peripheral == address {
                guard let characteristic = tree.characteristic(of: device.path, service: path.service, characteristic: path.characteristic) else { continue }
                wantedPaths[characteristic.path] = (wantedPaths[characteristic.path] ?? true) && acquire
            }
        }
        for (path, acquire) in wantedPaths where notify[path] == nil {
            let state = NotifyState(address: address, mode: acquire ? .acquired : .startNotify)
            notify[path] = state
            Task { await self.startNotify(path, state) }
        }
        for (path, state) in notify where state.address == address && wantedPaths[path] == nil {
            notify[path] = nil
            state.close(loop: loop, path: path)
            if state.mode == .startNotify {
                Task { _ = try? await self.bluez(path, BlueZ.gattCharacteristic, "StopNotify", []) }
            }
        }
    }

    private func startNotify(_ path: ObjectPath, _ state: NotifyState) async {
        do {
            switch state.mode {
            case .startNotify:
                _ = try await bluez(path, BlueZ.gattCharacteristic, "StartNotify", [])
            case .acquired:
                let reply = try await bluez(path, BlueZ.gattCharacteristic, "AcquireNotify", [.stringVariantDictionary([:])])
                guard let fd = reply.first?.unixFD else { throw ProtocolError(.deviceError, "AcquireNotify returned no fd") }
                guard notify[path] === state else { Glibc.close(fd); return }
                state.fd = fd
                _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
                state.watch = try? loop.watch(fd, for: .readable) { [weak self] events in
                    self?.assumeIsolated { $0.acquiredReadable(path, state, events) }
                }
            }
            log("bluetooth: \(state.address): notifications on for \(path.rawValue) (\(state.mode == .acquired ? "AcquireNotify" : "StartNotify"))")
        } catch {
            log("bluetooth: \(state.address): starting notifications for \(path.rawValue) failed: \(error); retrying after the next resolve or in 2 s")
            guard notify[path] === state else { return }
            notify[path] = nil
            loop.schedule(after: .seconds(2)) { [weak self] in
                self?.assumeIsolated { $0.reconcileNotifications(state.address) }
            }
        }
    }

    private func acquiredReadable(_ path: ObjectPath, _ state: NotifyState, _ events: IOEvents) {
        guard let fd = state.fd, notify[path] === state else { return }
        var buffer = [UInt8](repeating: 0, count: 1024)
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count > 0 {
                valueChanged(path, Array(buffer[0..<count]))
                continue
            }
            if count < 0 && (errno == EAGAIN || errno == EINTR) { return }
            // EOF or error: BlueZ hung the socket up (disconnect); re-acquired after the next resolve.
            state.close(loop: loop, path: path)
            notify[path] = nil
            return
        }
    }

    /// A characteristic's value changed: a notification (or a read's result,
    /// as CoreBluetooth also reports it) for every client subscribed to it.
    func valueChanged(_ path: ObjectPath, _ value: [UInt8]) {
        guard let characteristic = tree.characteristic(at: path), let servicePath = characteristic.service,
              let service = tree.properties(servicePath, BlueZ.gattService).map({ GattServiceView(path: servicePath, properties: $0) }),
              let devicePath = service.device, let device = tree.device(at: devicePath) else { return }
        let key = CharacteristicPath(peripheral: device.address, service: service.uuid, characteristic: characteristic.uuid)
        for (client, state) in clients where state.subscriptions[key] != nil {
            emit(.notification(key), body: value, to: client)
        }
    }

    func characteristicAppeared(_ path: ObjectPath) {
        guard let characteristic = tree.characteristic(at: path), let service = characteristic.service,
              let devicePath = tree.properties(service, BlueZ.gattService)?["Device"]?.objectPath,
              let device = tree.device(at: devicePath) else { return }
        reconcileNotifications(device.address)
    }
}
