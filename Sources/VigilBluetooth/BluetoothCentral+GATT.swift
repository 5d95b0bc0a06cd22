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
        guard let device = self.device(address), device.connected else {
            throw ProtocolError(.notConnected, "\(address) is not connected; connect first")
        }
        if !device.servicesResolved {
            guard await waitForServices(address, timeout: .seconds(30)) else {
                throw ProtocolError(.deviceError, "\(address): BlueZ did not resolve the services within 30 s")
            }
        }
        guard let device = self.device(address) else { throw ProtocolError(.notConnected, "\(address) went away") }
        return services(of: device, for: client)
    }

    func services(of device: DeviceView, for client: BluetoothClient) -> [GATTServiceInfo] {
        let subscribed = clients[client]?.subscriptions ?? [:]
        return tree.services(of: device.path).sorted { $0.path.rawValue < $1.path.rawValue }.map { service in
            GATTServiceInfo(
                uuid: service.uuid, primary: service.primary,
                characteristics: tree.characteristics(of: service.path).sorted { $0.path.rawValue < $1.path.rawValue }.map { characteristic in
                    let instance = self.instance(of: characteristic, service: service, device: device.path)
                    return GATTCharacteristicInfo(
                        uuid: characteristic.uuid, properties: characteristic.flags,
                        descriptors: tree.descriptors(of: characteristic.path).map { GATTDescriptorInfo(uuid: $0.uuid) },
                        notifying: subscribed[CharacteristicPath(
                            peripheral: device.address, service: service.uuid, characteristic: characteristic.uuid, instance: instance)] != nil,
                        instance: instance, handle: characteristic.handle)
                })
        }
    }

    /// Which instance of its UUID a characteristic is (see `CharacteristicPath`).
    func instance(of characteristic: GattCharacteristicView, service: GattServiceView, device: ObjectPath) -> Int {
        tree.characteristics(of: device, service: service.uuid, characteristic: characteristic.uuid)
            .firstIndex { $0.path == characteristic.path } ?? 0
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
        guard (0..<65536).contains(path.instance) else {
            throw ProtocolError(.invalidArgument, "instance \(path.instance) is out of range (0 is the first characteristic of a UUID)")
        }
        let canonical = CharacteristicPath(peripheral: address, service: service, characteristic: uuid, instance: path.instance)
        guard let device = self.device(address), device.connected else {
            throw ProtocolError(.notConnected, "\(address) is not connected")
        }
        guard let characteristic = tree.characteristic(of: device.path, service: service, characteristic: uuid, instance: path.instance) else {
            let count = tree.characteristics(of: device.path, service: service, characteristic: uuid).count
            throw ProtocolError(
                .notFound,
                "\(address) has no characteristic \(BluetoothUUID.short(uuid))\(path.instance == 0 ? "" : " instance \(path.instance)") in service \(BluetoothUUID.short(service))"
                    + (count > 0 ? " (it has \(count) of that UUID: instances 0-\(count - 1))" : "")
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

    /// With `descriptor`, writes that descriptor of the characteristic
    /// (always with response: ATT has no descriptor command).
    public func write(
        _ client: BluetoothClient, _ path: CharacteristicPath, value: [UInt8], withResponse: Bool, descriptor: String? = nil
    ) async throws(ProtocolError) {
        let (_, characteristic) = try resolve(path)
        if let descriptor {
            guard let uuid = BluetoothUUID.normalize(descriptor),
                  let found = tree.descriptors(of: characteristic.path).first(where: { $0.uuid == uuid }) else {
                throw ProtocolError(.notFound, "no descriptor \(descriptor) on that characteristic")
            }
            if uuid == BluetoothUUID.normalize("2902") {
                // BlueZ refuses CCCD writes (it owns subscriptions): say how instead.
                throw ProtocolError(.notPermitted, "the CCCD (2902) is BlueZ's: subscribe with ble.notify instead")
            }
            _ = try await bluez(found.path, BlueZ.gattDescriptor, "WriteValue", [.bytes(value), .stringVariantDictionary([:])])
            return
        }
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
    /// after every reconnect or BlueZ restart. `acquire` is `ble.notify`'s
    /// (see `NotifyPreference`).
    public func setNotify(_ client: BluetoothClient, _ path: CharacteristicPath, enabled: Bool, acquire: Bool?) throws(ProtocolError) {
        let address = try Self.address(path.peripheral)
        guard let service = BluetoothUUID.normalize(path.service), let uuid = BluetoothUUID.normalize(path.characteristic) else {
            throw ProtocolError(.invalidArgument, "'\(path.service)' / '\(path.characteristic)' are not Bluetooth UUIDs")
        }
        guard (0..<65536).contains(path.instance) else {
            throw ProtocolError(.invalidArgument, "instance \(path.instance) is out of range (0 is the first characteristic of a UUID)")
        }
        let canonical = CharacteristicPath(peripheral: address, service: service, characteristic: uuid, instance: path.instance)
        if enabled {
            if clients[client]?.connects.contains(address) != true {
                // Subscribing to a link that is up (another client's) makes it
                // this client's too: the subscription must survive a reconnect.
                guard self.device(address)?.connected == true else {
                    throw ProtocolError(.notConnected, "connect to \(address) before subscribing")
                }
                clients[client, default: CentralClientState()].connects.insert(address)
                clients[client]?.announced.insert(address)
            }
            if let device = self.device(address), device.servicesResolved {
                guard let characteristic = tree.characteristic(of: device.path, service: service, characteristic: uuid, instance: path.instance) else {
                    throw ProtocolError(.notFound, "\(address) has no characteristic \(canonical) (instance \(path.instance) of \(BluetoothUUID.short(uuid)) in service \(BluetoothUUID.short(service)))")
                }
                guard characteristic.flags.contains("notify") || characteristic.flags.contains("indicate") else {
                    throw ProtocolError(.notPermitted, "characteristic \(BluetoothUUID.short(uuid)) does not notify (flags: \(characteristic.flags.joined(separator: ",")))")
                }
            }
            clients[client]?.subscriptions[canonical] = NotifyPreference(acquire: acquire)
        } else {
            clients[client]?.subscriptions[canonical] = nil
        }
        reconcileNotifications(address)
    }

    /// Starts notifications every subscriber needs and stops the ones nobody does.
    ///
    /// One session per characteristic, whatever the number of subscribers:
    /// AcquireNotify (a socket: no D-Bus signal per value, for bluetoothd,
    /// dbus-daemon or vigild) unless a subscriber asked for StartNotify or the
    /// characteristic only indicates (BlueZ acquires `notify` only);
    /// StartNotify if AcquireNotify fails. See docs/bluetooth.md, "Notifications".
    func reconcileNotifications(_ address: String) {
        guard bus != nil, bluezOwner != nil, let device = self.device(address), device.connected, device.servicesResolved else { return }
        var wantedPaths: [ObjectPath: (key: CharacteristicPath, acquire: Bool)] = [:]
        for state in clients.values {
            for (path, preference) in state.subscriptions where path.peripheral == address {
                guard let characteristic = tree.characteristic(
                    of: device.path, service: path.service, characteristic: path.characteristic, instance: path.instance) else { continue }
                let acquire = preference != .startNotify && characteristic.flags.contains("notify")
                wantedPaths[characteristic.path] = (path, (wantedPaths[characteristic.path]?.acquire ?? true) && acquire)
            }
        }
        for (path, wanted) in wantedPaths where notify[path] == nil {
            let state = NotifyState(address: address, key: wanted.key, mode: wanted.acquire ? .acquired : .startNotify)
            notify[path] = state
            loop.task { await self.startNotify(path, state) }
        }
        for (path, state) in notify where state.address == address && wantedPaths[path] == nil {
            notify[path] = nil
            if state.fd != nil { releasedSockets.insert(path) }
            state.close(loop: loop, path: path)
            if state.mode == .startNotify {
                loop.task { _ = try? await self.bluez(path, BlueZ.gattCharacteristic, "StopNotify", []) }
            }
        }
    }

    private func startNotify(_ path: ObjectPath, _ state: NotifyState) async {
        if state.mode == .acquired {
            do {
                let reply = try await bluez(path, BlueZ.gattCharacteristic, "AcquireNotify", [.stringVariantDictionary([:])])
                guard let fd = reply.first?.unixFD else { throw ProtocolError(.deviceError, "AcquireNotify returned no fd") }
                guard notify[path] === state else { Glibc.close(fd); return }
                releasedSockets.remove(path)
                state.fd = fd
                _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
                state.watch = try loop.watch(fd, for: .readable) { [weak self] events in
                    self?.assumeIsolated { $0.acquiredReadable(path, state, events) }
                }
                let mtu = reply.count > 1 ? reply[1].unwrapped.uint16.map { ", MTU \($0)" } ?? "" : ""
                log("bluetooth: \(state.address): notifications on for \(path.rawValue) (AcquireNotify\(mtu))")
                return
            } catch {
                // Refused (another D-Bus client holds a StartNotify session:
                // InProgress; an older BlueZ and an indicate-only
                // characteristic: NotSupported; ...) or no watch: StartNotify.
                guard notify[path] === state else { return }
                state.close(loop: loop, path: path)
                state.mode = .startNotify
                log("bluetooth: \(state.address): AcquireNotify for \(path.rawValue) failed (\(error)); using StartNotify")
            }
        }
        do {
            _ = try await bluez(path, BlueZ.gattCharacteristic, "StartNotify", [])
            log("bluetooth: \(state.address): notifications on for \(path.rawValue) (StartNotify)")
        } catch {
            log("bluetooth: \(state.address): starting notifications for \(path.rawValue) failed: \(error); retrying after the next resolve or in 2 s")
            guard notify[path] === state else { return }
            notify[path] = nil
            loop.schedule(after: .seconds(2)) { [weak self] in
                self?.assumeIsolated { $0.reconcileNotifications(state.address) }
            }
        }
    }

    /// The shortest time between two reads of an AcquireNotify socket (see
    /// `acquiredReadable`): the most a value of a fast notifier waits in it.
    static let notificationReadInterval: Duration = .milliseconds(25)
    /// A read that found this many values or more is followed by no pause:
    /// the source is fast enough (over ~1,300 values a second) to fill
    /// BlueZ's socket (~270 small values, fewer long ones; then BlueZ drops
    /// them) in a few intervals, and its values come in large batches anyway.
    static let notificationPacedReadLimit = 32

    /// The AcquireNotify socket is readable: one packet per value (BlueZ
    /// writes each notification as a SOCK_SEQPACKET record). Everything
    /// waiting is read and handed on at once, so a burst costs its
    /// subscribers one delivery per wake-up rather than one per value.
    ///
    /// Paced while values come often: a socket read within
    /// `notificationReadInterval` of the last waits until that interval is
    /// over (the watch paused), so a fast notifier's values reach the
    /// subscribers as one delivery (for an app: one event, one journal record,
    /// one wake and acknowledgement) per interval rather than one per value,
    /// while a value after a quiet spell (a heart-rate monitor's, once a
    /// second) is read at once. The waiting values are in the socket, where
    /// they were before: nothing vigild took is held back in memory.
    private func acquiredReadable(_ path: ObjectPath, _ state: NotifyState, _ events: IOEvents) {
        guard let fd = state.fd, notify[path] === state else { return }
        let now = MonotonicInstant.now()
        if events.isDisjoint(with: [.hangup, .error]), let last = state.lastRead, let watch = state.watch,
           state.lastReadCount < Self.notificationPacedReadLimit,
           now < last.advanced(by: Self.notificationReadInterval), (try? loop.updateWatch(watch, for: [])) != nil {
            state.readPaused = true
            _ = loop.schedule(at: last.advanced(by: Self.notificationReadInterval)) { [weak self] in
                self?.assumeIsolated { central in
                    guard central.notify[path] === state, state.readPaused, let watch = state.watch else { return }
                    state.readPaused = false
                    // Level-triggered: whatever waits in the socket is reported at once.
                    try? central.loop.updateWatch(watch, for: .readable)
                }
            }
            return
        }
        state.lastRead = now
        var values: [[UInt8]] = []
        defer {
            state.lastReadCount = values.count
            if !values.isEmpty { deliver(values, of: state.key) }
        }
        var buffer = [UInt8](repeating: 0, count: 1024)
        while values.count < 128 {  // then back to the loop (still readable): other sources get their turn
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count > 0 {
                values.append(Array(buffer[0..<count]))
                continue
            }
            if count < 0 && (errno == EAGAIN || errno == EINTR) { return }
            if count == 0 && !Self.hungUp(fd) {
                // A notification with an empty value: a record of length 0,
                // which recv returns as 0 too (Bleak takes it for the end).
                values.append([])
                continue
            }
            // EOF or error: BlueZ hung the socket up. On a disconnect it is
            // acquired again after the next resolve; if the link is still up
            // (bluetoothd dropped it), a second from now.
            state.close(loop: loop, path: path)
            notify[path] = nil
            log("bluetooth: \(state.address): BlueZ closed the AcquireNotify socket of \(path.rawValue)")
            let address = state.address
            loop.schedule(after: .seconds(1)) { [weak self] in
                self?.assumeIsolated { $0.reconcileNotifications(address) }
            }
            return
        }
    }

    /// Closes every AcquireNotify socket and waits (up to a second) until
    /// BlueZ reports each released, before the daemon leaves the bus.
    ///
    /// bluetoothd 5.66 crashes (a use-after-free: `notify_client_disconnect`
    /// frees the session that `notify_io_destroy` uses after it) when the
    /// owner of an acquired session leaves the bus before bluetoothd has seen
    /// its socket close: in the lab, every stop of a vigild holding one
    /// killed bluetoothd. Closing the socket first lets it tear the session
    /// down in order. A vigild killed outright cannot do this.
    func releaseAcquiredNotifications() async {
        let acquired = notify.filter { $0.value.fd != nil }
        for (path, state) in acquired {
            state.close(loop: loop, path: path)
            notify[path] = nil
        }
        // Also the sockets closed earlier (a subscription ended, e.g. with a
        // client's connection during the daemon's stop) that BlueZ may not
        // have seen go yet: a released one answers at once.
        let paths = releasedSockets.union(acquired.keys)
        releasedSockets = []
        guard let bus, bluezOwner != nil, !paths.isEmpty else { return }
        let deadline = MonotonicInstant.now().advanced(by: .seconds(1))
        for path in paths {
            while MonotonicInstant.now() < deadline {
                let reply = try? await bus.call(
                    destination: BlueZ.service, path: path, interface: "org.freedesktop.DBus.Properties", member: "Get",
                    arguments: [.string(BlueZ.gattCharacteristic), .string("NotifyAcquired")], timeout: .milliseconds(500))
                guard reply?.first?.unwrapped.bool == true else { break }
                await withCheckedContinuation { continuation in
                    _ = loop.schedule(after: .milliseconds(10)) { continuation.resume() }
                }
            }
        }
        log("bluetooth: handed back \(paths.count) AcquireNotify socket(s) before leaving the bus")
    }

    /// Whether the peer of a socket has closed it (rather than sent an empty record).
    private static func hungUp(_ fd: Int32) -> Bool {
        var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&poller, 1, 0) >= 0 else { return true }
        return poller.revents & Int16(POLLHUP | POLLERR | POLLNVAL) != 0
    }

    /// A characteristic's value changed: a notification (or a read's result,
    /// as CoreBluetooth also reports it) for every client subscribed to it.
    func valueChanged(_ path: ObjectPath, _ value: [UInt8]) {
        if let state = notify[path] {
            return deliver([value], of: state.key)
        }
        guard let characteristic = tree.characteristic(at: path), let servicePath = characteristic.service,
              let service = tree.properties(servicePath, BlueZ.gattService).map({ GattServiceView(path: servicePath, properties: $0) }),
              let devicePath = service.device, let device = tree.device(at: devicePath), isLinkDevice(device) else { return }
        let instance = self.instance(of: characteristic, service: service, device: devicePath)
        deliver([value], of: CharacteristicPath(peripheral: device.address, service: service.uuid, characteristic: characteristic.uuid, instance: instance))
    }

    /// Values of a characteristic, in order, to every client subscribed to it.
    private func deliver(_ values: [[UInt8]], of key: CharacteristicPath) {
        for (client, state) in clients where state.subscriptions[key] != nil {
            delegate?.bluetooth(notifications: values, of: key, to: client)
        }
    }

    func characteristicAppeared(_ path: ObjectPath) {
        guard let characteristic = tree.characteristic(at: path), let service = characteristic.service,
              let devicePath = tree.properties(service, BlueZ.gattService)?["Device"]?.objectPath,
              let device = tree.device(at: devicePath) else { return }
        reconcileNotifications(device.address)
    }
}
