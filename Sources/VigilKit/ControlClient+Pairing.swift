import VigilProtocol

/// Pairing and bonds for the control role (`vigilctl ble pair/unpair/trust`):
/// the same requests as an app's, for any peripheral. The agent's prompts
/// for a pairing this connection asked for are pushed to it and come out of
/// `bluetoothEvents()` as `.pairingRequest`.
extension ControlClient {
    @discardableResult
    public func pair(_ address: String) async throws -> PairingState {
        try await connection.request(PairPeripheral(peripheral: address), expecting: PairingState.self)
    }

    public func cancelPairing(_ address: String) async throws {
        _ = try await connection.request(CancelPairing(peripheral: address), expecting: Done.self)
    }

    public func forget(_ address: String) async throws {
        _ = try await connection.request(ForgetPeripheral(peripheral: address), expecting: Done.self)
    }

    @discardableResult
    public func setTrusted(_ trusted: Bool, peripheral address: String) async throws -> PairingState {
        try await connection.request(SetTrusted(peripheral: address, trusted: trusted), expecting: PairingState.self)
    }

    /// Answers a `.pairingRequest` pushed to this connection.
    public func respond(to prompt: PairingPrompt, accept: Bool, passkey: Int? = nil, pin: String? = nil) async throws {
        _ = try await connection.request(
            PairingResponse(request: prompt.request, accept: accept, passkey: passkey, pin: pin), expecting: Done.self)
    }
}
