import VigilBluetooth
import VigilProtocol

/// Pairing and bonds: `ble.pair`, `ble.cancelPairing`, `ble.forget`,
/// `ble.setTrusted` and the answers to the agent's prompts
/// (`ble.pairingResponse`). The agent itself is the central's
/// (`BluetoothCentral+Pairing`); prompts reach apps as `ble.pairingRequest`
/// events (waking them) and vigilctl as pushes, through `deliver`.
extension BluetoothComponent {
    static let pairingRequests: Set<String> = [
        PairPeripheral.type, CancelPairing.type, ForgetPeripheral.type, SetTrusted.type, PairingResponse.type,
    ]

    func handlePairingRequest<S: DaemonServices>(
        _ message: IncomingMessage, _ central: BluetoothCentral, client: BluetoothClient, connection: ClientConnection,
        services: isolated S
    ) throws(ProtocolError) {
        let id = message.id
        let connectionID = connection.id
        let core = services
        func later(_ work: @escaping @Sendable (BluetoothCentral) async throws(ProtocolError) -> any Message) {
            services.loop.task {
                let outcome: Result<(any Message, [UInt8]), ProtocolError>
                do throws(ProtocolError) {
                    outcome = .success((try await work(central), []))
                } catch {
                    outcome = .failure(error)
                }
                await core.answer(outcome, id: id, connectionID: connectionID)
            }
        }
        switch message.type {
        case PairPeripheral.type:
            let request: PairPeripheral = try message.decode()
            later { central throws(ProtocolError) in try await central.pair(client, address: request.peripheral) }
        case CancelPairing.type:
            let request: CancelPairing = try message.decode()
            later { central throws(ProtocolError) in
                try await central.cancelPairing(client, address: request.peripheral)
                return Done()
            }
        case ForgetPeripheral.type:
            let request: ForgetPeripheral = try message.decode()
            later { central throws(ProtocolError) in
                try await central.forget(client, address: request.peripheral)
                return Done()
            }
        case SetTrusted.type:
            let request: SetTrusted = try message.decode()
            later { central throws(ProtocolError) in
                try await central.setTrusted(client, address: request.peripheral, trusted: request.trusted)
            }
        case PairingResponse.type:
            // Synchronous: the prompt is answered before anything else happens.
            let request: PairingResponse = try message.decode()
            let outcome: Result<Done, ProtocolError> = central.assumeIsolated { central in
                do throws(ProtocolError) {
                    try central.answerPrompt(client, request)
                    return .success(Done())
                } catch { return .failure(error) }
            }
            switch outcome {
            case let .success(reply): services.send(reply, id: id, to: connection)
            case let .failure(error): throw ProtocolError(error.code, error.message, id: id)
            }
        default:
            throw ProtocolError(.unknownMessage, "unknown Bluetooth request '\(message.type)'", id: id)
        }
    }
}
