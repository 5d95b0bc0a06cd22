import VigilDBus

/// BlueZ's `org.bluez.Agent1`, typed: the object bluetoothd calls during a
/// pairing to ask for a passkey, a PIN, a confirmation or an authorization
/// (doc/org.bluez.Agent.rst). vigild exports one on its BlueZ connection and
/// registers it as the default agent (`AgentManager1.RegisterAgent`,
/// `RequestDefaultAgent`): without an agent bluetoothd makes the adapter
/// non-bondable and no bond is ever stored.
///
/// This type only speaks D-Bus: it turns each call into an `AgentRequest`
/// and each `AgentAnswer` into the reply BlueZ expects. What to answer (the
/// policy, and which client is asked) is the central's (`BluetoothCentral+Pairing`).
public enum PairingAgent {
    public static let path: ObjectPath = "/org/vigil/agent"
    public static let interface = "org.bluez.Agent1"
    public static let manager = "org.bluez.AgentManager1"
    public static let managerPath: ObjectPath = "/org/bluez"

    /// KeyboardDisplay: the one capability with which every association
    /// model can happen. Passkey entry both ways (the peripheral shows a
    /// passkey a person or the app types; or vigild shows one to type on the
    /// peripheral), numeric comparison with LE Secure Connections, and Just
    /// Works with peripherals that have no input or output. The first two give
    /// authenticated (MITM-protected) keys, which `secure-*` and
    /// `encrypt-authenticated-*` characteristics and L2CAP `high` security
    /// need; NoInputNoOutput could never satisfy them, DisplayYesNo could not
    /// pair with a peripheral that shows a passkey, KeyboardOnly not with one
    /// that asks for a passkey to be typed on it.
    public static let capability = "KeyboardDisplay"

    /// BlueZ's agent errors.
    public static let rejected = "org.bluez.Error.Rejected"
    public static let canceled = "org.bluez.Error.Canceled"

    /// Exports the agent object; `handler` gets each request on the loop.
    public static func export(on bus: DBusConnection, handler: @escaping @Sendable (AgentRequest, AgentReply) -> Void) async throws(DBusError) {
        try await bus.export(path) { call in
            guard call.interface == nil || call.interface == interface else { return call.replyUnknownMethod() }
            guard let request = AgentRequest(call) else { return call.replyUnknownMethod() }
            handler(request, AgentReply(call: call, request: request))
        }
    }

    /// Registers the exported agent with bluetoothd, as the default agent.
    public static func register(on bus: DBusConnection) async throws {
        do {
            _ = try await bus.call(
                destination: BlueZ.service, path: managerPath, interface: manager, member: "RegisterAgent",
                arguments: [.objectPath(path), .string(capability)], timeout: .seconds(10))
        } catch let error as DBusError where error.name == "org.bluez.Error.AlreadyExists" {
            // Registered already on this connection (the mirror was loaded again): still ours.
        }
        _ = try await bus.call(
            destination: BlueZ.service, path: managerPath, interface: manager, member: "RequestDefaultAgent",
            arguments: [.objectPath(path)], timeout: .seconds(10))
    }
}

/// One call of bluetoothd on the agent.
public enum AgentRequest: Sendable, Equatable {
    case requestPinCode(device: ObjectPath)
    case displayPinCode(device: ObjectPath, pin: String)
    case requestPasskey(device: ObjectPath)
    case displayPasskey(device: ObjectPath, passkey: UInt32, entered: UInt16)
    case requestConfirmation(device: ObjectPath, passkey: UInt32)
    case requestAuthorization(device: ObjectPath)
    case authorizeService(device: ObjectPath, uuid: String)
    /// BlueZ gave up on the request in progress (the pairing failed or was cancelled).
    case cancel
    /// bluetoothd unregistered the agent.
    case release

    init?(_ call: DBusMethodCall) {
        let arguments = call.arguments
        let device = arguments.first?.objectPath
        switch (call.member, device) {
        case ("RequestPinCode", let device?): self = .requestPinCode(device: device)
        case ("DisplayPinCode", let device?):
            guard let pin = arguments.dropFirst().first?.string else { return nil }
            self = .displayPinCode(device: device, pin: pin)
        case ("RequestPasskey", let device?): self = .requestPasskey(device: device)
        case ("DisplayPasskey", let device?):
            guard arguments.count == 3, let passkey = arguments[1].uint32, let entered = arguments[2].uint16 else { return nil }
            self = .displayPasskey(device: device, passkey: passkey, entered: entered)
        case ("RequestConfirmation", let device?):
            guard let passkey = arguments.dropFirst().first?.uint32 else { return nil }
            self = .requestConfirmation(device: device, passkey: passkey)
        case ("RequestAuthorization", let device?): self = .requestAuthorization(device: device)
        case ("AuthorizeService", let device?):
            guard let uuid = arguments.dropFirst().first?.string else { return nil }
            self = .authorizeService(device: device, uuid: uuid)
        case ("Cancel", _): self = .cancel
        case ("Release", _): self = .release
        default: return nil
        }
    }

    /// The device the request is about (nil for `cancel` and `release`).
    public var device: ObjectPath? {
        switch self {
        case let .requestPinCode(device), let .displayPinCode(device, _), let .requestPasskey(device),
             let .displayPasskey(device, _, _), let .requestConfirmation(device, _), let .requestAuthorization(device),
             let .authorizeService(device, _):
            device
        case .cancel, .release:
            nil
        }
    }
}

/// How a request is answered.
public enum AgentAnswer: Sendable, Equatable {
    /// Accept: the reply without a value (confirmations, authorizations, displays, Cancel, Release).
    case accept
    case passkey(UInt32)
    case pin(String)
    /// `org.bluez.Error.Rejected`.
    case reject(String)
    /// `org.bluez.Error.Canceled`.
    case cancel(String)
}

/// The pending call behind one request: answered once.
public struct AgentReply: Sendable {
    let call: DBusMethodCall
    let request: AgentRequest

    public func answer(_ answer: AgentAnswer) {
        switch answer {
        case .accept:
            // A value is required where BlueZ asked for one: refusing beats a malformed reply.
            switch request {
            case .requestPinCode, .requestPasskey: call.replyError(name: PairingAgent.rejected, message: "no value given")
            default: try? call.reply()
            }
        case let .passkey(passkey): try? call.reply([.uint32(passkey)])
        case let .pin(pin): try? call.reply([.string(pin)])
        case let .reject(why): call.replyError(name: PairingAgent.rejected, message: why)
        case let .cancel(why): call.replyError(name: PairingAgent.canceled, message: why)
        }
    }
}
