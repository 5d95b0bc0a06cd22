import VigilDBus
import VigilProtocol

/// Publishing: each service is its own GATT application (its own root and
/// RegisterApplication), so adding or removing one never disturbs another.
/// While BlueZ calls back for the objects, the loop keeps running: the
/// registration is awaited, never blocked on.
extension BluetoothPeripheral {
    /// `adapter`: the request's (a name or address), nil for the default.
    public func addService(_ client: BluetoothClient, _ definition: GATTServiceDefinition, adapter selector: String? = nil) async throws(ProtocolError) {
        let service = try GATTDefinitionCheck.canonical(definition)
        let choice = try chooseAdapter(selector)
        // The same service again replaces it (a client republishing after a
        // reconnect, or changing its definition).
        if let old = clients[client]?.services.first(where: { $0.definition.uuid == service.uuid }) {
            clients[client]?.services.removeAll { $0 === old }
            await unpublish(old)
        }
        var state = clients[client] ?? PeripheralClientState()
        let root = try objectPath("/org/vigil/gatt/\(token(client))/app\(nextServiceNumber)")
        nextServiceNumber += 1
        let published = PublishedService(definition: service, root: root)
        published.adapter = choice
        state.services.append(published)
        clients[client] = state
        do throws(ProtocolError) {
            try await publish(published, for: client)
        } catch {
            clients[client]?.services.removeAll { $0 === published }
            await unpublish(published)
            throw error
        }
        log("bluetooth: \(client) published service \(BluetoothUUID.short(service.uuid)) (\(service.characteristics.count) characteristic(s))")
    }

    public func removeService(_ client: BluetoothClient, uuid: String?) async throws(ProtocolError) {
        let wanted = try uuid.map { text throws(ProtocolError) -> String in
            guard let id = BluetoothUUID.normalize(text) else { throw ProtocolError(.invalidArgument, "'\(text)' is not a Bluetooth UUID") }
            return id
        }
        let removed = clients[client]?.services.filter { wanted == nil || $0.definition.uuid == wanted } ?? []
        if let wanted, removed.isEmpty {
            throw ProtocolError(.notFound, "this client publishes no service \(BluetoothUUID.short(wanted))")
        }
        clients[client]?.services.removeAll { service in removed.contains { $0 === service } }
        for service in removed { await unpublish(service) }
    }

    /// Exports the service's objects and registers them with BlueZ. If the
    /// service was withdrawn while BlueZ answered (its client re-registered
    /// or ended), the registration is undone at once.
    func publish(_ service: PublishedService, for client: BluetoothClient) async throws(ProtocolError) {
        try await registerWithBlueZ(service, for: client)
        if service.withdrawn {
            await unpublish(service)
            throw ProtocolError(.invalidState, "the service was withdrawn while BlueZ registered it")
        }
    }

    private func registerWithBlueZ(_ service: PublishedService, for client: BluetoothClient) async throws(ProtocolError) {
        guard let (bus, adapter) = await blueZ(adapter: service.adapter) else {
            throw ProtocolError(.unavailable, "bluetoothd is not running or the adapter is not there")
        }
        do {
            let tree = try await DBusObjectTree.export(at: service.root, on: bus)
            service.tree = tree
            let servicePath = try service.root.appending("service0")
            try await tree.add(servicePath, interfaces: [BlueZ.gattService: [
                "UUID": .string(service.definition.uuid), "Primary": .bool(service.definition.primary ?? true),
            ]])
            for (index, definition) in service.definition.characteristics.enumerated() {
                let path = try servicePath.appending("char\(index)")
                let fixed = definition.value.flatMap(GATTHex.bytes)
                service.characteristics[path] = PublishedCharacteristic(
                    service: service.definition.uuid, uuid: definition.uuid, flags: definition.properties, fixedValue: fixed)
                try await tree.add(path, interfaces: [BlueZ.gattCharacteristic: [
                    "UUID": .string(definition.uuid), "Service": .objectPath(servicePath), "Flags": .strings(definition.properties),
                ]], handler: { [weak self] call in
                    self?.assumeIsolated { $0.characteristicCall(call, client: client, service: service) }
                })
                for (number, descriptor) in (definition.descriptors ?? []).enumerated() {
                    let value = GATTHex.bytes(descriptor.value) ?? []
                    try await tree.add(try path.appending("desc\(number)"), interfaces: [BlueZ.gattDescriptor: [
                        "UUID": .string(descriptor.uuid), "Characteristic": .objectPath(path), "Flags": .strings(["read"]),
                    ]], handler: { call in
                        Self.answerFixedRead(call, value)
                    })
                }
            }
            _ = try await bus.call(
                destination: BlueZ.service, path: adapter, interface: BlueZ.gattManager, member: "RegisterApplication",
                arguments: [.objectPath(service.root), .stringVariantDictionary([:])], timeout: .seconds(30))
            service.registered = true
            service.registeredOn = adapter
        } catch let error as DBusError {
            throw ProtocolError(.deviceError, "RegisterApplication: \(error.name)\(error.message.isEmpty ? "" : ": " + error.message)")
        } catch {
            throw ProtocolError(.internalError, "publishing the service: \(error)")
        }
    }

    func unpublish(_ service: PublishedService) async {
        service.withdrawn = true
        if service.registered, let (bus, fallback) = await blueZ(adapter: service.adapter) {
            _ = try? await bus.call(
                destination: BlueZ.service, path: service.registeredOn ?? fallback, interface: BlueZ.gattManager, member: "UnregisterApplication",
                arguments: [.objectPath(service.root)], timeout: .seconds(10))
        }
        service.registered = false
        for (path, _) in service.characteristics { failPending(on: path) }
        await service.tree?.unexport()
        service.tree = nil
    }

    /// BlueZ (re)appeared: publish what every client asked for. Its old
    /// registrations died with it (or with our old bus connection).
    func bluezReady() async {
        for (client, state) in clients {
            for service in state.services where !service.registered {
                await service.tree?.unexport()
                service.tree = nil
                do {
                    try await publish(service, for: client)
                    log("bluetooth: republished \(client)'s service \(BluetoothUUID.short(service.definition.uuid))")
                } catch {
                    log("bluetooth: republishing \(client)'s service \(BluetoothUUID.short(service.definition.uuid)) failed: \(error)")
                }
            }
            if let advertisement = state.advertisement, !advertisement.registered {
                await advertisement.tree?.unexport()
                advertisement.tree = nil
                do {
                    try await register(advertisement)
                } catch {
                    log("bluetooth: re-advertising for \(client) failed: \(error)")
                }
            }
        }
    }

    /// BlueZ is gone: nothing is registered any more; requests in flight fail.
    func bluezGone() {
        for state in clients.values {
            for service in state.services {
                service.registered = false
                for path in service.characteristics.keys {
                    failPending(on: path)
                    service.characteristics[path]?.notifying = false
                }
            }
            state.advertisement?.registered = false
        }
    }

    func token(_ client: BluetoothClient) -> String {
        switch client {
        case let .app(id): "app_" + String(id.map { $0.isLetter || $0.isNumber ? $0 : "_" })
        case let .control(connection): "control\(connection)"
        }
    }

    func objectPath(_ text: String) throws(ProtocolError) -> ObjectPath {
        do {
            return try ObjectPath(text)
        } catch {
            throw ProtocolError(.internalError, "cannot make object path \(text): \(error)")
        }
    }
}
