import VigilBluetooth
import VigilProtocol

/// `ble.*` requests, from apps and from vigilctl alike. The central runs on
/// the daemon's loop; requests that wait on BlueZ answer later, from a task,
/// so the loop never blocks on the radio.
extension BluetoothComponent {
    /// The central role's request types (the L2CAP ones are `L2CAPComponent`'s).
    static let centralRequests: Set<String> = [
        RegisterCentral.type, GetBluetoothState.type, StartScan.type, StopScan.type, ListPeripherals.type,
        ConnectPeripheral.type, CancelPeripheralConnection.type, SetNotify.type, DiscoverServices.type,
        ReadCharacteristic.type, WriteCharacteristic.type,
    ]
    /// The peripheral role's request types.
    static let peripheralRequests: Set<String> = [
        RegisterPeripheral.type, AddService.type, RemoveService.type, StartAdvertising.type, StopAdvertising.type,
        RespondToRequest.type, UpdateValue.type,
    ]

    func handle<S: DaemonServices>(
        _ message: IncomingMessage, from requester: Requester, on connection: ClientConnection, services: isolated S
    ) throws(ProtocolError) {
        let client = BluetoothClient(requester)
        // What an app asks of Bluetooth outlives a daemon restart: save soon
        // (debounced). Only requests that change what it asked for: answers and
        // value updates come many per second and change nothing saved.
        if case .app = client, Self.intentRequests.contains(message.type) { services.scheduleSave() }
        guard let central else {
            throw ProtocolError(.unavailable, "Bluetooth is disabled in this daemon's config", id: message.id)
        }
        let id = message.id
        if Self.peripheralRequests.contains(message.type) {
            guard let peripheral else { throw ProtocolError(.unavailable, "Bluetooth is disabled", id: id) }
            return try handlePeripheralRequest(message, peripheral, client: client, connection: connection, services: services)
        }
        if Self.monitorRequests.contains(message.type) {
            return try handleMonitorRequest(message, central, client: client, connection: connection, services: services)
        }
        if Self.pairingRequests.contains(message.type) {
            return try handlePairingRequest(message, central, client: client, connection: connection, services: services)
        }
        // Synchronous requests: answered at once, on the loop.
        func now<R: Message>(_ body: @Sendable (isolated BluetoothCentral) throws(ProtocolError) -> R) throws(ProtocolError) {
            let outcome: Result<R, ProtocolError> = central.assumeIsolated { central in
                do throws(ProtocolError) { return .success(try body(central)) } catch { return .failure(error) }
            }
            switch outcome {
            case let .success(reply): services.send(reply, id: id, to: connection)
            case let .failure(error): throw ProtocolError(error.code, error.message, id: id)
            }
        }
        // Requests that wait for BlueZ or the device: answered from a task.
        let core = services
        func later(_ body: @escaping @Sendable (BluetoothCentral) async throws(ProtocolError) -> (any Message, [UInt8])) {
            let connectionID = connection.id
            services.loop.task {
                let outcome: Result<(any Message, [UInt8]), ProtocolError>
                do throws(ProtocolError) {
                    outcome = .success(try await body(central))
                } catch {
                    outcome = .failure(error)
                }
                await core.answer(outcome, id: id, connectionID: connectionID)
            }
        }
        switch message.type {
        case RegisterCentral.type:
            let request: RegisterCentral = try message.decode()
            try now { $0.register(client, restoreIdentifier: request.restoreIdentifier) }
        case GetBluetoothState.type:
            try now { central in
                let health = central.health
                return BluetoothStateReply(state: central.state, adapter: central.adapterName, condition: health.condition, detail: health.detail)
            }
        case StartScan.type:
            let request: StartScan = try message.decode()
            try now { central throws(ProtocolError) in
                try central.startScan(
                    client, services: request.services, allowDuplicates: request.allowDuplicates ?? false, adapter: request.adapter)
                return Done()
            }
        case StopScan.type:
            try now { $0.stopScan(client); return Done() }
        case ListPeripherals.type:
            try now { PeripheralList(peripherals: $0.knownPeripherals()) }
        case ConnectPeripheral.type:
            let request: ConnectPeripheral = try message.decode()
            try now { central throws(ProtocolError) in
                try central.connect(client, address: request.peripheral, adapter: request.adapter)
                return Done()
            }
        case CancelPeripheralConnection.type:
            let request: CancelPeripheralConnection = try message.decode()
            try now { central throws(ProtocolError) in
                try central.cancelConnection(client, address: request.peripheral)
                return Done()
            }
        case SetNotify.type:
            let request: SetNotify = try message.decode()
            let path = request.path
            try now { central throws(ProtocolError) in
                try central.setNotify(client, path, enabled: request.enabled, acquire: request.acquire)
                return Done()
            }
        case DiscoverServices.type:
            let request: DiscoverServices = try message.decode()
            later { central throws(ProtocolError) in
                (GATTServices(services: try await central.discoverServices(client, address: request.peripheral)), [])
            }
        case ReadCharacteristic.type:
            let request: ReadCharacteristic = try message.decode()
            let path = request.path
            later { central throws(ProtocolError) in
                (CharacteristicValue(), try await central.read(client, path, descriptor: request.descriptor))
            }
        case WriteCharacteristic.type:
            let request: WriteCharacteristic = try message.decode()
            let path = request.path
            let value = message.body
            later { central throws(ProtocolError) in
                try await central.write(client, path, value: value, withResponse: request.withResponse, descriptor: request.descriptor)
                return (Done(), [])
            }
        default:
            throw ProtocolError(.unknownMessage, "unknown Bluetooth request '\(message.type)'", id: id)
        }
    }

    /// The peripheral role's requests: all answered from a task, since
    /// publishing waits for BlueZ (which calls back into our objects meanwhile).
    private func handlePeripheralRequest<S: DaemonServices>(
        _ message: IncomingMessage, _ peripheral: BluetoothPeripheral, client: BluetoothClient, connection: ClientConnection,
        services: isolated S
    ) throws(ProtocolError) {
        let id = message.id
        let connectionID = connection.id
        let body = message.body
        let core = services
        func later(_ work: @escaping @Sendable (BluetoothPeripheral) async throws(ProtocolError) -> (any Message, [UInt8])) {
            services.loop.task {
                let outcome: Result<(any Message, [UInt8]), ProtocolError>
                do throws(ProtocolError) {
                    outcome = .success(try await work(peripheral))
                } catch {
                    outcome = .failure(error)
                }
                await core.answer(outcome, id: id, connectionID: connectionID)
            }
        }
        switch message.type {
        case RegisterPeripheral.type:
            let request: RegisterPeripheral = try message.decode()
            later { peripheral in (await peripheral.register(client, restoreIdentifier: request.restoreIdentifier), []) }
        case AddService.type:
            let request: AddService = try message.decode()
            later { peripheral throws(ProtocolError) in
                try await peripheral.addService(client, request.service, adapter: request.adapter)
                return (Done(), [])
            }
        case RemoveService.type:
            let request: RemoveService = try message.decode()
            later { peripheral throws(ProtocolError) in
                try await peripheral.removeService(client, uuid: request.uuid)
                return (Done(), [])
            }
        case StartAdvertising.type:
            let request: StartAdvertising = try message.decode()
            later { peripheral throws(ProtocolError) in
                try await peripheral.startAdvertising(client, request.advertisement, adapter: request.adapter)
                return (Done(), [])
            }
        case StopAdvertising.type:
            later { peripheral in
                await peripheral.stopAdvertising(client)
                return (Done(), [])
            }
        // Answers and updates are synchronous: they keep the order they came in.
        case RespondToRequest.type:
            let request: RespondToRequest = try message.decode()
            let outcome: Result<Done, ProtocolError> = peripheral.assumeIsolated { peripheral in
                do throws(ProtocolError) {
                    try peripheral.respond(client, request: request.request, value: body, error: request.error)
                    return .success(Done())
                } catch { return .failure(error) }
            }
            switch outcome {
            case let .success(reply): services.send(reply, id: id, to: connection)
            case let .failure(error): throw ProtocolError(error.code, error.message, id: id)
            }
        case UpdateValue.type:
            let request: UpdateValue = try message.decode()
            let outcome: Result<ValueUpdated, ProtocolError> = peripheral.assumeIsolated { peripheral in
                do throws(ProtocolError) {
                    return .success(try peripheral.updateValue(client, service: request.service, characteristic: request.characteristic, value: body))
                } catch { return .failure(error) }
            }
            switch outcome {
            case let .success(reply): services.send(reply, id: id, to: connection)
            case let .failure(error): throw ProtocolError(error.code, error.message, id: id)
            }
        default:
            break
        }
    }
}
