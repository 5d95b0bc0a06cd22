import Glibc
import VigilDBus
import VigilProtocol

/// A serial port service (SPP server role) a client published: what goes
/// into bluetoothd's `ProfileManager1.RegisterProfile`.
public struct SerialServiceSpec: Sendable, Hashable {
    /// The service class UUID, normalized (128-bit, lower case).
    public let uuid: String
    /// The server channel (1-30); nil: bluetoothd picks a free one.
    public let channel: UInt8?
    public let name: String
    public let requireAuthentication: Bool

    public init(uuid: String, channel: UInt8?, name: String, requireAuthentication: Bool) {
        self.uuid = uuid
        self.channel = channel
        self.name = name
        self.requireAuthentication = requireAuthentication
    }
}

/// A remote device's connection to a published service: the RFCOMM
/// socket bluetoothd accepted and handed over in `Profile1.NewConnection`.
public struct SerialConnection: Sendable {
    public let uuid: String
    public let device: String
    /// Owned by the receiver (a duplicate libdbus made).
    public let fd: Int32
}

/// What the central keeps of published serial services: the spec and who
/// hears of connections and failures, by UUID.
struct SerialServices {
    var published: [String: SerialRegistration] = [:]
}

struct SerialRegistration {
    let client: BluetoothClient
    let spec: SerialServiceSpec
    let connected: @Sendable (SerialConnection) -> Void
    let failed: @Sendable (String) -> Void
    /// The bus generation it is exported on, and whether bluetoothd (this owner) has it.
    var exportedOn = -1
    var registeredWith: String?
}

/// Serial port services through BlueZ's `Profile1`: vigild exports one
/// profile object per published service and registers it with
/// `ProfileManager1.RegisterProfile` (Role server, the channel, the name),
/// so bluetoothd adds the SDP record, listens on the RFCOMM channel and,
/// for each device that connects, hands the accepted socket to
/// `NewConnection`. Registrations die with bluetoothd: every appearance of
/// it registers them all again (`registerSerialServices`).
extension BluetoothCentral {
    static let profileManager = "org.bluez.ProfileManager1"
    static let profileInterface = "org.bluez.Profile1"

    static func profilePath(_ uuid: String) -> ObjectPath {
        // A normalized UUID has only hex digits and hyphens: a valid path element once the hyphens are underscores.
        (try? ObjectPath("/org/vigil/serial/s" + String(uuid.map { $0 == "-" ? "_" : $0 }))) ?? "/org/vigil/serial/invalid"
    }

    /// Publishes `spec` (registering it now if bluetoothd is there, else when
    /// it appears). `connected` gets each connection, `failed` a refusal of
    /// bluetoothd's; both on the loop.
    public func publishSerialService(
        _ spec: SerialServiceSpec, for client: BluetoothClient, connected: @escaping @Sendable (SerialConnection) -> Void,
        failed: @escaping @Sendable (String) -> Void
    ) {
        if let old = serialServices.published[spec.uuid] {
            guard old.spec != spec || old.client != client else { return }
            unpublishSerialService(spec.uuid)
        }
        serialServices.published[spec.uuid] = SerialRegistration(client: client, spec: spec, connected: connected, failed: failed)
        loop.task { await self.registerSerialService(spec.uuid) }
    }

    public func unpublishSerialService(_ uuid: String) {
        guard let registration = serialServices.published.removeValue(forKey: uuid) else { return }
        let path = Self.profilePath(uuid)
        guard let bus else { return }
        let exported = registration.exportedOn == busGeneration
        let registered = registration.registeredWith != nil
        loop.task {
            if exported { await bus.unexport(path) }
            guard registered else { return }
            do {
                _ = try await bus.call(destination: BlueZ.service, path: PairingAgent.managerPath, interface: Self.profileManager,
                                       member: "UnregisterProfile", arguments: [.objectPath(path)], timeout: .seconds(10))
            } catch {
                self.log("bluetooth: unregistering the serial service \(uuid) failed: \(error)")
            }
        }
    }

    /// Clients with a published serial service: a device pairing with the
    /// machine to reach one gets its prompts answered by them.
    func serialPublishers() -> [BluetoothClient] {
        Array(Set(serialServices.published.values.map(\.client))).sorted { "\($0)" < "\($1)" }
    }

    /// After every appearance of bluetoothd: it has forgotten every profile.
    func registerSerialServices() async {
        for uuid in serialServices.published.keys.sorted() {
            serialServices.published[uuid]?.registeredWith = nil
            await registerSerialService(uuid)
        }
    }

    private func registerSerialService(_ uuid: String) async {
        guard let bus, let owner = bluezOwner, let registration = serialServices.published[uuid],
              registration.registeredWith != owner else { return }
        let path = Self.profilePath(uuid)
        if registration.exportedOn != busGeneration {
            do {
                try await bus.export(path) { [weak self] call in
                    self?.assumeIsolated { $0.profileCall(call, uuid: uuid) }
                }
            } catch {
                return log("bluetooth: cannot export the serial service \(uuid): \(error)")
            }
            serialServices.published[uuid]?.exportedOn = busGeneration
        }
        let spec = registration.spec
        var options: [String: DBusValue] = [
            "Name": .string(spec.name), "Role": .string("server"), "AutoConnect": .bool(false),
            "RequireAuthentication": .bool(spec.requireAuthentication),
            // The app that published the service asked for its connections: no prompt per device.
            "RequireAuthorization": .bool(false),
        ]
        if let channel = spec.channel { options["Channel"] = .uint16(UInt16(channel)) }
        do {
            _ = try await bus.call(
                destination: BlueZ.service, path: PairingAgent.managerPath, interface: Self.profileManager, member: "RegisterProfile",
                arguments: [.objectPath(path), .string(uuid), .stringVariantDictionary(options)], timeout: .seconds(10))
        } catch let error as DBusError where error.name == "org.bluez.Error.AlreadyExists" {
            // Registered already on this connection: still ours.
        } catch {
            guard let current = serialServices.published[uuid], current.spec == spec else { return }
            log("bluetooth: bluetoothd refused the serial service \(uuid): \(error)")
            current.failed("bluetoothd refused the service: \(error)")
            return
        }
        guard bluezOwner == owner, serialServices.published[uuid]?.spec == spec else { return }
        serialServices.published[uuid]?.registeredWith = owner
        log("bluetooth: serial service \(uuid) registered\(spec.channel.map { " on channel \($0)" } ?? "")")
    }

    /// bluetoothd calls the profile: a connection (`NewConnection`), a
    /// disconnection request, or its release.
    private func profileCall(_ call: DBusMethodCall, uuid: String) {
        guard call.interface == nil || call.interface == Self.profileInterface else { return call.replyUnknownMethod() }
        switch call.member {
        case "NewConnection":
            let arguments = call.arguments
            guard arguments.count >= 2, let device = arguments[0].objectPath, case let .unixFD(fd) = arguments[1] else {
                return call.replyError(name: "org.bluez.Error.InvalidArguments", message: "NewConnection(o, h, a{sv}) expected")
            }
            guard let registration = serialServices.published[uuid], let address = tree.device(at: device)?.address else {
                _ = Glibc.close(fd)
                return call.replyError(name: PairingAgent.rejected, message: "the service is no longer published, or the device is unknown")
            }
            try? call.reply()
            registration.connected(SerialConnection(uuid: uuid, device: address, fd: fd))
        case "RequestDisconnection", "Release":
            // The socket is vigild's: closing it is the stream layer's.
            try? call.reply()
        default:
            call.replyUnknownMethod()
        }
    }
}
