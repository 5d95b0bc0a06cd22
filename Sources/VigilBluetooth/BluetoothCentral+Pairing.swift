import VigilDBus
import VigilProtocol
import VigilSystem

/// What the agent and pairing keep: whether BlueZ has the agent, the prompts
/// waiting for a client's answer, the pairings clients asked for.
struct AgentState {
    /// The bus generation the agent object is exported on.
    var exportedOn = -1
    var registered = false
    var prompts: [Int: PendingPrompt] = [:]
    var nextPrompt = 1
    /// Address -> the pairing a client asked for (`ble.pair`), while BlueZ's Pair runs.
    var attempts: [String: PairingAttempt] = [:]
    /// Addresses whose resumed pairing intent waits for the device to be seen
    /// (BlueZ could not reach it), or whose resumed pairing is about to start.
    var unreachable: Set<String> = []
    /// Address -> clients that paired it through vigild (they may forget and trust it).
    var pairedBy: [String: Set<BluetoothClient>] = [:]
    /// How long a prompt waits for its answer: inside BlueZ's own agent
    /// timeout and the kernel's 30 s SMP timeout, enough to wake an app.
    var promptTimeout: Duration = .seconds(20)
}

struct PendingPrompt {
    let client: BluetoothClient
    let address: String
    let kind: PairingPromptKind
    let reply: AgentReply
    let timer: TimerID
}

struct PairingAttempt {
    let client: BluetoothClient
    let id: Int
    /// The device object BlueZ pairs (its path stays when its address changes).
    let path: ObjectPath
    /// Resumed from the state file after vigild's restart (no `ble.pair` waits).
    var restored = false
    /// What vigild knows of why it failed (a prompt unanswered or rejected).
    var why: String?
    /// The waiting `ble.pair`, resumed once by whichever comes first: BlueZ's
    /// Pair reply, the device reporting itself paired, or the deadline.
    var finish: CheckedContinuation<PairingOutcome, Never>?
    var deadline: TimerID?
}

/// How a pairing vigild started ended.
enum PairingOutcome {
    /// BlueZ's Pair replied (or said AlreadyExists).
    case replied
    /// The device object reported Paired (and Bonded, on a bondable adapter)
    /// before Pair replied: bluetoothd signals it just before its reply, and
    /// 5.66 sometimes sends no reply at all.
    case reportedPaired
    case failed(DBusError)
    case deadline(Duration)
}

/// The pairing agent's policy and the pair / cancel / forget / trust requests.
///
/// Policy (docs/bluetooth.md, "Pairing and bonds"): a prompt about a device
/// goes to the client pairing it (`ble.pair`), else to a client that asked to
/// connect to it (a pairing BlueZ started for a protected characteristic),
/// else, for a remote central pairing with the machine, to a client of the
/// peripheral role; with nobody to ask it is rejected. Just Works
/// (RequestAuthorization) and service authorizations are accepted without a
/// prompt for a device some client pairs or uses, and for remote centrals
/// while a client publishes services; otherwise rejected. A prompt not
/// answered within `promptTimeout` is cancelled, never left hanging.
extension BluetoothCentral {
    public func setPairingPromptTimeout(_ timeout: Duration) {
        agent.promptTimeout = timeout
    }

    /// Exports the agent on the current bus connection (once per connection).
    func exportAgent(_ bus: DBusConnection) async {
        guard agent.exportedOn != busGeneration else { return }
        let generation = busGeneration
        do {
            try await PairingAgent.export(on: bus) { [weak self] request, reply in
                self?.assumeIsolated { $0.agentRequest(request, reply) }
            }
            agent.exportedOn = generation
        } catch {
            log("bluetooth: cannot export the pairing agent: \(error)")
        }
    }

    /// Registers the agent as BlueZ's default (after every appearance of
    /// bluetoothd: a restarted one has forgotten it) and keeps the adapters bondable.
    func registerAgent() async {
        guard let bus, let owner = bluezOwner else { return }
        await exportAgent(bus)
        agent.registered = false
        do {
            try await PairingAgent.register(on: bus)
            guard bluezOwner == owner else { return }
            agent.registered = true
            log("bluetooth: pairing agent registered (\(PairingAgent.capability), default agent)")
        } catch {
            log("bluetooth: registering the pairing agent failed: \(error); pairing needs another agent")
        }
        for adapter in tree.adapters { await keepBondable(adapter) }
    }

    /// Adapter1.Pairable is BlueZ's bondable setting: without it no bond is stored.
    func keepBondable(_ adapter: AdapterView) async {
        guard agent.registered, adapter.properties["Pairable"]?.bool == false, let bus else { return }
        log("bluetooth: \(adapter.name) is not bondable; turning Pairable on so bonds are stored")
        do {
            _ = try await bus.call(
                destination: BlueZ.service, path: adapter.path, interface: BlueZ.properties, member: "Set",
                arguments: [.string(BlueZ.adapter), .string("Pairable"), .variant(.bool(true))], timeout: .seconds(10))
        } catch {
            log("bluetooth: turning Pairable on for \(adapter.name) failed: \(error)")
        }
    }

    /// BlueZ went: its requests went with it.
    func agentGone() {
        agent.registered = false
        cancelPrompts(reason: "bluetoothd stopped", where: { _ in true })
    }

    // MARK: Requests from BlueZ

    func agentRequest(_ request: AgentRequest, _ reply: AgentReply) {
        switch request {
        case .release:
            agent.registered = false
            log("bluetooth: BlueZ released the pairing agent")
            return reply.answer(.accept)
        case .cancel:
            cancelPrompts(reason: "BlueZ cancelled the request (the pairing failed or was cancelled)", where: { _ in true })
            return reply.answer(.accept)
        default:
            break
        }
        guard let path = request.device else { return reply.answer(.reject("no device")) }
        let address = tree.device(at: path)?.address ?? Self.address(ofPath: path)
        let target = promptTarget(address)
        let known = target != nil
        switch request {
        case .requestAuthorization:
            if let target {
                log("bluetooth: \(address): Just Works pairing accepted (for \(target.client))")
                return reply.answer(.accept)
            }
            log("bluetooth: \(address): Just Works pairing refused: no client pairs, uses or serves it")
            return reply.answer(.reject("no Vigil client pairs with or uses this device"))
        case let .authorizeService(_, uuid):
            if known || tree.device(at: path)?.properties["Paired"]?.bool == true {
                return reply.answer(.accept)
            }
            log("bluetooth: \(address): service \(uuid) not authorized: no client uses the device")
            return reply.answer(.reject("no Vigil client uses this device"))
        default:
            break
        }
        guard let (client, mode) = target else {
            log("bluetooth: \(address): pairing prompt refused: no client pairs with, uses or serves it")
            return reply.answer(.reject("no Vigil client pairs with or uses this device"))
        }
        let prompt: PairingPrompt
        let id = agent.nextPrompt
        agent.nextPrompt += 1
        let seconds = Double(agent.promptTimeout.components.seconds) + Double(agent.promptTimeout.components.attoseconds) / 1e18
        switch request {
        case .requestPinCode: prompt = PairingPrompt(request: id, peripheral: address, kind: .pin, timeout: seconds)
        case .requestPasskey: prompt = PairingPrompt(request: id, peripheral: address, kind: .passkey, timeout: seconds)
        case let .requestConfirmation(_, passkey):
            prompt = PairingPrompt(request: id, peripheral: address, kind: .confirm, passkey: Int(passkey), timeout: seconds)
        case let .displayPasskey(_, passkey, entered):
            prompt = PairingPrompt(request: id, peripheral: address, kind: .displayPasskey, passkey: Int(passkey), entered: Int(entered))
        case let .displayPinCode(_, pin):
            prompt = PairingPrompt(request: id, peripheral: address, kind: .displayPin, pin: pin)
        default:
            return reply.answer(.reject("unexpected request"))
        }
        log("bluetooth: \(address): pairing prompt \(id) (\(prompt.kind.rawValue)) for \(client)")
        if prompt.kind.needsAnswer {
            let timeout = agent.promptTimeout
            let timer = loop.schedule(after: timeout) { [weak self] in
                self?.assumeIsolated { $0.promptExpired(id, after: timeout) }
            }
            agent.prompts[id] = PendingPrompt(client: client, address: address, kind: prompt.kind, reply: reply, timer: timer)
        } else {
            reply.answer(.accept)
        }
        let content = BluetoothEventContent.pairingRequest(prompt)
        delegate?.bluetooth(emit: content.kind, attributes: content.attributes, body: [], mode: mode, to: client)
    }

    /// Who answers a prompt about `address`, and the mode that wakes it.
    private func promptTarget(_ address: String) -> (client: BluetoothClient, mode: BackgroundMode)? {
        if let attempt = agent.attempts[address] { return (attempt.client, .bluetoothCentral) }
        let users = clients.filter { $0.value.connects.contains(address) }.map(\.key).sorted { "\($0)" < "\($1)" }
        if let user = users.first { return (user, .bluetoothCentral) }
        // A remote central pairing with the machine, to use a client's services.
        let publishers = (peripheral?.assumeIsolated { $0.publishingClients() } ?? []).sorted { "\($0)" < "\($1)" }
        if let publisher = publishers.first { return (publisher, .bluetoothPeripheral) }
        // A BR/EDR device pairing to reach a published serial port service.
        if let publisher = serialPublishers().first { return (publisher, .bluetoothPeripheral) }
        return nil
    }

    private func promptExpired(_ id: Int, after timeout: Duration) {
        guard let prompt = agent.prompts.removeValue(forKey: id) else { return }
        let why = "nobody answered the \(prompt.kind.rawValue) prompt within \(timeout)"
        log("bluetooth: \(prompt.address): \(why); pairing rejected")
        agent.attempts[prompt.address]?.why = why
        prompt.reply.answer(.cancel(why))
        emitCancelled(id, prompt, reason: why)
    }

    func cancelPrompts(reason: String, where matches: (PendingPrompt) -> Bool) {
        for (id, prompt) in agent.prompts.sorted(by: { $0.key < $1.key }) where matches(prompt) {
            agent.prompts[id] = nil
            loop.cancelTimer(prompt.timer)
            prompt.reply.answer(.cancel(reason))
            emitCancelled(id, prompt, reason: reason)
        }
    }

    private func emitCancelled(_ id: Int, _ prompt: PendingPrompt, reason: String) {
        let content = BluetoothEventContent.pairingCancelled(request: id, peripheral: prompt.address, reason: reason)
        let mode: BackgroundMode = clients[prompt.client] == nil ? .bluetoothPeripheral : .bluetoothCentral
        delegate?.bluetooth(emit: content.kind, attributes: content.attributes, body: [], mode: mode, to: prompt.client)
    }

    /// A client's answer to a prompt.
    public func answerPrompt(_ client: BluetoothClient, _ response: PairingResponse) throws(ProtocolError) {
        guard let prompt = agent.prompts[response.request], prompt.client == client else {
            throw ProtocolError(.notFound, "no pairing prompt \(response.request) is waiting for this client's answer (answered, cancelled, or past its deadline)")
        }
        let answer: AgentAnswer
        if !response.accept {
            answer = .reject("rejected by \(client)")
            agent.attempts[prompt.address]?.why = "\(client) rejected the \(prompt.kind.rawValue) prompt"
        } else {
            switch prompt.kind {
            case .passkey:
                guard let passkey = response.passkey, (0...999_999).contains(passkey) else {
                    throw ProtocolError(.invalidArgument, "a passkey prompt needs 'passkey', 0-999999")
                }
                answer = .passkey(UInt32(passkey))
            case .pin:
                guard let pin = response.pin, (1...16).contains(pin.utf8.count) else {
                    throw ProtocolError(.invalidArgument, "a PIN prompt needs 'pin', 1-16 characters")
                }
                answer = .pin(pin)
            default:
                answer = .accept
            }
        }
        agent.prompts[response.request] = nil
        loop.cancelTimer(prompt.timer)
        log("bluetooth: \(prompt.address): pairing prompt \(response.request) answered by \(client) (\(response.accept ? "accepted" : "rejected"))")
        prompt.reply.answer(answer)
    }

    /// A client ended for good: its prompts are cancelled at once rather than at their deadline.
    func promptsOfEndedClient(_ client: BluetoothClient) {
        cancelPrompts(reason: "\(client) went away", where: { $0.client == client })
        for (address, clients) in agent.pairedBy where clients.contains(client) {
            agent.pairedBy[address]?.remove(client)
        }
    }

    // MARK: Requests from clients

    /// Pairs (and bonds) with a peripheral BlueZ knows; returns once BlueZ says it is paired.
    /// An app's request is a pairing intent until it is answered: saved with
    /// its other Bluetooth intents, so vigild's death mid-pairing does not
    /// lose it (`resumePairings`).
    public func pair(_ client: BluetoothClient, address rawAddress: String) async throws(ProtocolError) -> PairingState {
        let address = try Self.address(rawAddress)
        guard bus != nil, bluezOwner != nil, !loading else { throw ProtocolError(.unavailable, "Bluetooth is not available") }
        guard let device = self.device(address) else {
            throw ProtocolError(.notFound, "BlueZ does not know \(address): scan for it (or ask to connect to it) first")
        }
        agent.pairedBy[address, default: []].insert(client)
        if device.paired { return pairingState(address) }
        if let attempt = agent.attempts[address] {
            let restored = attempt.restored && attempt.client == client
                ? " (vigild resumed this app's pairing after its restart: ble.pairingEnded tells its end)" : ""
            throw ProtocolError(.invalidState, "a pairing with \(address) is already in progress\(restored)")
        }
        let isApp: Bool = if case .app = client { true } else { false }
        if isApp { clients[client, default: CentralClientState()].pairs.insert(address) }
        let result = await runPairing(client, address: address, device: device, restored: false)
        // Answered: the reply is the app's news, the intent is done.
        if isApp { endIntent(client, address, result) }
        return try result.get()
    }

    /// BlueZ's pairing for `client`, to its end: the state (under the
    /// address the object has now) or the error, reported as `ble.pair` does.
    private func runPairing(
        _ client: BluetoothClient, address: String, device: DeviceView, restored: Bool
    ) async -> Result<PairingState, ProtocolError> {
        guard let bus else { return .failure(ProtocolError(.unavailable, "Bluetooth is not available")) }
        if !agent.registered { log("bluetooth: \(address): pairing without vigild's agent registered (prompts go to another agent)") }
        let id = Int.random(in: 1...Int.max)
        let path = device.path
        let limit = pairingDeadline
        log("bluetooth: \(address): pairing, \(restored ? "resumed for" : "asked by") \(client)")
        let outcome = await withCheckedContinuation { (continuation: CheckedContinuation<PairingOutcome, Never>) in
            let timer = loop.schedule(after: limit) { [weak self] in
                self?.assumeIsolated { _ = $0.endPairing(id, .deadline(limit)) }
            }
            agent.attempts[address] = PairingAttempt(
                client: client, id: id, path: path, restored: restored, finish: continuation, deadline: timer)
            loop.task { [weak self] in await self?.callPair(bus, path, id: id, address: address) }
        }
        // The attempt may have moved to another address meanwhile (deviceAddressChanged).
        let ended = agent.attempts.first { $0.value.id == id }
        if let ended { agent.attempts[ended.key] = nil }
        let why = ended?.value.why.map { ": \($0)" } ?? ""
        let now = ended?.key ?? address
        cancelPrompts(reason: "the pairing ended", where: { ($0.address == address || $0.address == now) && $0.client == client })
        var failure: ProtocolError?
        switch outcome {
        case .replied:
            break
        case .reportedPaired:
            log("bluetooth: \(address): BlueZ reports it paired: the pairing is done (Pair's reply not waited for)")
        case let .failed(error):
            let short = error.name.hasPrefix("org.bluez.Error.") ? String(error.name.dropFirst("org.bluez.Error.".count)) : error.name
            failure = ProtocolError(.deviceError, "pairing with \(address) failed: \(short) (\(error.name): \(error.message))\(why)")
        case let .deadline(limit):
            // Past the time a prompt's answer and SMP take: BlueZ is told to
            // stop, so neither its pairing nor vigild's attempt stays behind.
            failure = ProtocolError(.deviceError, "pairing with \(address) did not end within \(limit): cancelled\(why)")
            _ = try? await bus.call(destination: BlueZ.service, path: path, interface: BlueZ.device, member: "CancelPairing", timeout: .seconds(10))
        }
        if let failure {
            log("bluetooth: \(failure.message)")
            return .failure(failure)
        }
        await reread(device.path, interface: BlueZ.device)
        // A bond with a peer's IRK makes BlueZ report the same object under
        // its identity address: the state (and the address to use from now
        // on) is the object's, not the private address the client named.
        let current = tree.device(at: device.path)?.address ?? address
        let state = pairingState(current)
        log("bluetooth: \(address): paired (bonded \(state.bonded))\(current == address ? "" : ", now \(current)")")
        return .success(state)
    }

    /// An intent is done: its pairing ended (answered or reported), or it was
    /// cancelled or forgotten. Under the address asked and the one it has now.
    private func endIntent(_ client: BluetoothClient, _ address: String, _ result: Result<PairingState, ProtocolError>?) {
        guard clients[client] != nil else { return }
        clients[client]?.pairs.remove(address)
        if case let .success(state)? = result { clients[client]?.pairs.remove(state.peripheral) }
        agent.unreachable.remove(address)
        if clients[client]?.isEmpty == true, clients[client]?.restoreIdentifier == nil { clients[client] = nil }
    }

    // MARK: Pairing intents across vigild's restarts

    /// Pairs, for the apps that asked, the devices whose `ble.pair` vigild's
    /// death cut (restored from the state file): once BlueZ knows the device,
    /// and again whenever it is seen (advertising, connected) after BlueZ
    /// could not reach it. The app is told by `ble.pairingEnded` (which wakes
    /// or relaunches it); its prompts reach it as for any pairing.
    func resumePairings(_ only: String? = nil) {
        guard bus != nil, bluezOwner != nil, !loading else { return }
        let intents = clients.flatMap { client, state in state.pairs.map { (client, $0) } }
            .filter { only == nil || $0.1 == only }
            .sorted { "\($0.1) \($0.0)" < "\($1.1) \($1.0)" }
        for (client, address) in intents {
            guard agent.attempts[address] == nil, !agent.unreachable.contains(address),
                  clients[client]?.pairs.contains(address) == true, let device = self.device(address) else { continue }
            agent.pairedBy[address, default: []].insert(client)
            if device.paired {
                log("bluetooth: \(address): paired already; \(client)'s pairing from before vigild's restart is done")
                endIntent(client, address, .success(pairingState(address)))
                emit(.pairingEnded(pairingState(address), error: nil), to: client)
                continue
            }
            // Claimed now, so a second call before the task runs starts nothing.
            agent.unreachable.insert(address)
            loop.task { [weak self] in await self?.resumePairing(client, address: address, device: device) }
        }
    }

    private func resumePairing(_ client: BluetoothClient, address: String, device: DeviceView) async {
        agent.unreachable.remove(address)
        guard agent.attempts[address] == nil, clients[client]?.pairs.contains(address) == true else { return }
        let result = await runPairing(client, address: address, device: device, restored: true)
        guard clients[client]?.pairs.contains(address) == true else { return }  // cancelled or forgotten meanwhile
        if case let .failure(error) = result, Self.unreachable(error) {
            // Not in range: kept, tried again when BlueZ next sees it.
            agent.unreachable.insert(address)
            log("bluetooth: \(address): \(client)'s pairing waits until the device is seen again")
            if error.message.contains("did not end within"), let bus, let now = self.device(address), now.connected {
                // A pairing retried on the link whose pairing failed (the one
                // vigild's death cut) can stall after encryption (labs 59 and
                // 66): the next try is on a fresh link, which a connect
                // request makes at once and the device's next advertisement
                // otherwise.
                log("bluetooth: \(address): dropping the link the stalled pairing ran on")
                _ = try? await bus.call(
                    destination: BlueZ.service, path: now.path, interface: BlueZ.device, member: "Disconnect", timeout: .seconds(10))
            }
            return
        }
        endIntent(client, address, result)
        switch result {
        case let .success(state): emit(.pairingEnded(state, error: nil), to: client)
        case let .failure(error): emit(.pairingEnded(pairingState(address), error: error.message), to: client)
        }
    }

    /// A failure that says the device was not there, not that pairing with it failed.
    private static func unreachable(_ error: ProtocolError) -> Bool {
        error.code == .unavailable || error.message.contains("ConnectionAttemptFailed")
            || error.message.contains("did not end within") || error.message.contains("AuthenticationTimeout")
            || error.message.contains("UnknownObject")
    }

    /// BlueZ saw the device (it advertised, connected, appeared): a pairing
    /// intent waiting for it is tried again.
    func deviceSeenForPairing(_ address: String) {
        guard agent.unreachable.contains(address), agent.attempts[address] == nil else {
            if clients.values.contains(where: { $0.pairs.contains(address) }) { resumePairings(address) }
            return
        }
        agent.unreachable.remove(address)
        resumePairings(address)
    }

    /// How long a `ble.pair` may take: a prompt's answer (vigild's own
    /// deadline), an LE connection if BlueZ must make one (the kernel gives up
    /// after 20 s), and SMP (the kernel's 30 s timeout); never longer than
    /// bluetoothd's own bound on a pairing (BONDING_TIMEOUT, 120 s, after
    /// which it cancels the kernel's), whatever the prompt timeout.
    var pairingDeadline: Duration { min(agent.promptTimeout + .seconds(50), .seconds(120)) }

    /// BlueZ's Device1.Pair, its reply handed to the attempt it belongs to.
    private func callPair(_ bus: DBusConnection, _ path: ObjectPath, id: Int, address: String) async {
        do {
            _ = try await bus.call(destination: BlueZ.service, path: path, interface: BlueZ.device, member: "Pair", timeout: pairingDeadline + .seconds(30))
            if !endPairing(id, .replied) {
                log("bluetooth: \(address): BlueZ's Pair replied after the pairing had ended (ignored)")
            }
        } catch let error as DBusError where error.name == "org.bluez.Error.AlreadyExists" {
            endPairing(id, .replied)  // paired already (by someone else meanwhile)
        } catch let error as DBusError {
            endPairing(id, .failed(error))
        } catch {
            endPairing(id, .failed(.failed("\(error)")))
        }
    }

    /// Resumes the attempt's `ble.pair` once, and says whether it did: a
    /// second ending (the Pair reply after the device said it was paired, or
    /// after the deadline) finds nothing to resume.
    @discardableResult
    func endPairing(_ id: Int, _ outcome: PairingOutcome) -> Bool {
        guard let address = agent.attempts.first(where: { $0.value.id == id })?.key,
              let finish = agent.attempts[address]?.finish else { return false }
        agent.attempts[address]?.finish = nil
        if let timer = agent.attempts[address]?.deadline { loop.cancelTimer(timer) }
        finish.resume(returning: outcome)
        return true
    }

    /// A device object's Paired or Bonded changed: a `ble.pair` waiting on it
    /// (by its path, or by its address if BlueZ made another object for the
    /// identity) ends when it is paired, and bonded where the adapter bonds.
    /// bluetoothd signals this just before its Pair reply, and 5.66 sometimes
    /// sends no reply at all (lab 66: Just Works ending with service discovery).
    func pairedChanged(_ device: DeviceView) {
        guard device.paired else { return }
        let bondable = tree.adapters.first { $0.path == device.adapter }?.properties["Pairable"]?.bool ?? true
        guard device.bonded || !bondable else { return }
        for (address, attempt) in agent.attempts where attempt.path == device.path || address == device.address {
            endPairing(attempt.id, .reportedPaired)
        }
    }

    public func cancelPairing(_ client: BluetoothClient, address rawAddress: String) async throws(ProtocolError) {
        let address = try Self.address(rawAddress)
        let isApp: Bool = if case .app = client { true } else { false }
        if isApp, agent.attempts[address]?.client != client, clients[client]?.pairs.contains(address) != true {
            throw ProtocolError(.notPermitted, "this app is not pairing with \(address)")
        }
        // The pairing intent ends: the app's own; for the control role, every app's.
        let intents = clients.filter { $0.value.pairs.contains(address) && (!isApp || $0.key == client) }.map(\.key)
        for owner in intents { endIntent(owner, address, nil) }
        guard let bus, let device = self.device(address) else {
            if !intents.isEmpty { return }
            throw ProtocolError(.notFound, "BlueZ does not know \(address)")
        }
        agent.attempts[address]?.why = "cancelled by \(client)"
        cancelPrompts(reason: "the pairing was cancelled", where: { $0.address == address })
        do {
            _ = try await bus.call(destination: BlueZ.service, path: device.path, interface: BlueZ.device, member: "CancelPairing", timeout: .seconds(10))
        } catch let error as DBusError where error.name == "org.bluez.Error.DoesNotExist" {
            // Nothing in progress.
        } catch {
            throw ProtocolError(.deviceError, "cancelling the pairing with \(address) failed: \(error)")
        }
    }

    /// Forgets the bond and BlueZ's record of the device (Adapter1.RemoveDevice),
    /// and the connect requests and pairing intents that name it (`endRequests(naming:of:reason:)`).
    public func forget(_ client: BluetoothClient, address rawAddress: String) async throws(ProtocolError) {
        let address = try Self.address(rawAddress)
        try requireManage(client, address)
        guard let bus, let device = self.device(address), let adapter = device.adapter else {
            // Not known to BlueZ (any more): what clients still ask of it ends all the same.
            if endRequests(naming: address, of: client, reason: "forgotten (ble.forget by \(client))") { return }
            throw ProtocolError(.notFound, "BlueZ does not know \(address)")
        }
        log("bluetooth: \(address): forgetting its bond, asked by \(client)")
        // First: the link BlueZ takes down with the device is then reported
        // once, as forgotten, not as a loss vigild would reconnect.
        endRequests(naming: address, of: client, reason: "forgotten (ble.forget by \(client))")
        do {
            _ = try await bus.call(
                destination: BlueZ.service, path: adapter, interface: BlueZ.adapter, member: "RemoveDevice",
                arguments: [.objectPath(device.path)], timeout: .seconds(10))
        } catch {
            throw ProtocolError(.deviceError, "forgetting \(address) failed: \(error)")
        }
        agent.pairedBy[address] = nil
    }

    /// A forgotten device: the connect requests, subscriptions and pairing
    /// intents naming it end (else vigild would reconnect, and pair again, a
    /// device it was asked to forget): every client's when the control role
    /// forgets, the app's own when an app does (one app does not end
    /// another's requests). Each client whose connect request ended gets
    /// `ble.disconnected` (willReconnect false) saying so. Whether anything ended.
    @discardableResult
    func endRequests(naming address: String, of forgetter: BluetoothClient, reason: String) -> Bool {
        var ended = false
        let everyone: Bool = if case .control = forgetter { true } else { false }
        for (client, state) in clients.sorted(by: { "\($0.key)" < "\($1.key)" }) where everyone || client == forgetter {
            let subscribed = state.subscriptions.keys.filter { $0.peripheral == address }
            guard state.connects.contains(address) || state.pairs.contains(address) || !subscribed.isEmpty else { continue }
            ended = true
            let adapter = linkAdapterName(address)
            let connected = state.connects.contains(address)
            clients[client]?.connects.remove(address)
            clients[client]?.connectAdapters[address] = nil
            clients[client]?.announced.remove(address)
            clients[client]?.pairs.remove(address)
            for path in subscribed { clients[client]?.subscriptions[path] = nil }
            if connected {
                log("bluetooth: \(address): \(client)'s connect request ended: \(reason)")
                emit(.disconnected(peripheral: address, reason: reason, willReconnect: false, adapter: adapter), to: client)
            }
        }
        agent.unreachable.remove(address)
        guard ended else { return false }
        reconcileNotifications(address)
        reconcileLink(address)
        reconcileDiscovery()
        return true
    }

    public func setTrusted(_ client: BluetoothClient, address rawAddress: String, trusted: Bool) async throws(ProtocolError) -> PairingState {
        let address = try Self.address(rawAddress)
        try requireManage(client, address)
        guard let bus, let device = self.device(address) else { throw ProtocolError(.notFound, "BlueZ does not know \(address)") }
        do {
            _ = try await bus.call(
                destination: BlueZ.service, path: device.path, interface: BlueZ.properties, member: "Set",
                arguments: [.string(BlueZ.device), .string("Trusted"), .variant(.bool(trusted))], timeout: .seconds(10))
        } catch {
            throw ProtocolError(.deviceError, "setting Trusted on \(address) failed: \(error)")
        }
        await reread(device.path, interface: BlueZ.device)
        return pairingState(address)
    }

    /// Who may forget or trust a device: the control role any; an app one it
    /// asked to connect to or paired through vigild.
    private func requireManage(_ client: BluetoothClient, _ address: String) throws(ProtocolError) {
        guard case .app = client else { return }
        if clients[client]?.connects.contains(address) == true || agent.pairedBy[address]?.contains(client) == true { return }
        throw ProtocolError(.notPermitted, "an app may forget or trust only a device it connects to or paired (\(address))")
    }

    func pairingState(_ address: String) -> PairingState {
        let device = self.device(address)
        return PairingState(
            peripheral: address, paired: device?.paired ?? false, bonded: device?.bonded ?? false,
            trusted: device?.trusted ?? false)
    }

    /// dev_AA_BB_CC_DD_EE_FF -> AA:BB:CC:DD:EE:FF.
    static func address(ofPath path: ObjectPath) -> String {
        guard let last = path.rawValue.split(separator: "/").last, last.hasPrefix("dev_") else { return path.rawValue }
        return String(last.dropFirst(4).map { $0 == "_" ? ":" : $0 })
    }
}

// MARK: Addresses that change

extension BluetoothCentral {
    /// BlueZ changed a device object's `Address`: a bond's IRK resolved the
    /// resolvable private address it was known by, and BlueZ now reports the
    /// identity address (same object, same path). The mirror follows the
    /// object: what clients asked for under the old address (connect
    /// requests, subscriptions, links) moves to the new one, and each is told
    /// (`ble.addressChanged`), so a connect request made before the bond is
    /// still kept, never timing out, under the identity.
    func deviceAddressChanged(_ path: ObjectPath, from old: String, to new: String) {
        guard !old.isEmpty, !new.isEmpty, old != new else { return }
        log("bluetooth: \(path) is now \(new) (was \(old)): its clients' requests follow it")
        var told: [BluetoothClient] = []
        for (client, var state) in clients {
            var involved = false
            if state.connects.remove(old) != nil { state.connects.insert(new); involved = true }
            if state.pairs.remove(old) != nil { state.pairs.insert(new); involved = true }
            if let adapter = state.connectAdapters.removeValue(forKey: old) { state.connectAdapters[new] = adapter }
            if state.announced.remove(old) != nil { state.announced.insert(new) }
            if state.seen.remove(old) != nil { state.seen.insert(new) }
            for (key, preference) in state.subscriptions where key.peripheral == old {
                state.subscriptions[key] = nil
                var moved = key
                moved.peripheral = new
                state.subscriptions[moved] = preference
                involved = true
            }
            clients[client] = state
            if involved { told.append(client) }
        }
        if var link = links.removeValue(forKey: old) {
            // A Connect in flight, its checks and retries name the old address:
            // they end here (a late reply finds no link), and reconcileLink
            // goes on under the new one.
            link.cancelAttempt(loop: loop)
            link.attempt = 0
            if links[new] == nil { links[new] = link }
        }
        if let waiters = resolvedWaiters.removeValue(forKey: old) { resolvedWaiters[new, default: []] += waiters }
        if let paired = agent.pairedBy.removeValue(forKey: old) {
            agent.pairedBy[new, default: []].formUnion(paired)
            told += paired.filter { !told.contains($0) }
        }
        if let attempt = agent.attempts.removeValue(forKey: old) { agent.attempts[new] = attempt }
        for (notifyPath, state) in notify where state.address == old {
            state.close(loop: loop, path: notifyPath)
            notify[notifyPath] = nil
        }
        for client in told {
            emit(.addressChanged(peripheral: new, previous: old), to: client)
        }
        reconcileNotifications(new)
        reconcileLink(new)
    }
}
