import FoundationEssentials
import Glibc
import Logging
import VigilAccessories
import VigilConfig
import VigilLifecycle
import VigilProtocol
import VigilSerial
import VigilStreams
import VigilSystem
import VigilUdev

/// Serial accessories: udev discovery and hot-plug, the registry of
/// connected accessories, which accessory and protocol each session is on
/// (and reopening it when the accessory returns), the port keeper, and the
/// accessory requests. A session's bytes are the stream layer's
/// (`StreamSessions`): this opens the port and hands it over as a
/// `SerialEndpoint`.
final class AccessoriesComponent: StreamTransport {
    let name = "accessories"
    let transportName = "accessory"
    let requestTypes: Set<String> = [
        ListAccessories.type, RegisterForAccessoryNotifications.type, WatchAccessories.type, OpenSession.type,
        SetSessionLines.type, SendBreak.type, WatchSessionLines.type, SetSessionRS485.type,
        GetHIDReportDescriptor.type, GetHIDFeatureReport.type, SetHIDFeatureReport.type,
    ]

    var udev: Udev?
    var monitor: UdevMonitor?
    var monitorWatch: WatchID?
    /// Why udev could not be used, if it could not (for `status`).
    var udevProblem: String?
    var registry = AccessoryRegistry(rules: [])
    /// Which accessory, protocol and line settings each session is on.
    var table = SessionTable()
    /// The open ports, by session (the stream layer carries them).
    var ports: [Int: SerialEndpoint] = [:]
    /// The open hidraw nodes, by session (record sessions of the stream layer).
    var hidDevices: [Int: HIDEndpoint] = [:]
    /// Waiting `reopen` sessions whose open failed on the accessory's current
    /// connection, and when they try again (see `reopen`).
    var reopenRetries: [Int: ReopenRetry] = [:]
    /// Sessions whose modem lines are watched (`watchSessionLines`).
    var lineWatches: [Int: LineWatch] = [:]
    /// Sessions in a break, and the timer that ends it.
    var breaks: [Int: PendingBreak] = [:]
    /// Apps that asked for connect/disconnect events (kept across their relaunches).
    var registeredApps: Set<String> = []
    /// Registered apps without `external-accessory` now in the background: they
    /// were told every accessory disconnected and hear nothing until they return.
    var mutedApps: Set<String> = []
    /// Control connections following `vigilctl accessories watch`.
    var watchers: Set<Int> = []
    /// How to start a port keeper; nil: none (see `VigilDaemonService.portKeeper`).
    let portKeeperCommand: [String]?
    /// Holds a duplicate of every open port, so a daemon's death does not close them.
    var portKeeper: FileDescriptorKeeper?
    /// When starting one last failed (CLOCK_MONOTONIC ns): not tried again for a while.
    var portKeeperFailedAt: UInt64?
    /// Ports an earlier daemon left with the keeper, by session, until restored.
    var keptPorts: [Int: Int32] = [:]
    /// The daemon's logger, for the port keeper's losses found where no
    /// services are at hand (a port closed by the stream layer).
    var logger: Logger?

    struct ReopenRetry {
        var connectionID: UInt64
        var backoff = ReopenBackoff()
        var timer: TimerID?
    }

    /// The udev subsystems whose device nodes may be accessories: serial
    /// ports and USB HID devices (hidraw nodes).
    static let subsystems = ["tty", "hidraw"]

    init(portKeeperCommand: [String]?) {
        self.portKeeperCommand = portKeeperCommand
    }

    // MARK: Start and stop

    /// Enumerates serial devices, then follows hot-plug (without udev the
    /// daemon runs on, with no accessories); takes back the ports a keeper
    /// holds for an earlier daemon, and the sessions it recorded.
    func start<S: DaemonServices>(restoring saved: DaemonSnapshot, services: isolated S) throws {
        registry = AccessoryRegistry(rules: services.config.accessoryRules)
        logger = services.logger
        do {
            let udev = try Udev()
            let monitor = try UdevMonitor(udev: udev, subsystems: Self.subsystems)
            self.udev = udev
            self.monitor = monitor
            monitorWatch = try services.loop.watch(
                monitor.fd, for: .readable, services.watchCallback(AccessoriesComponent.self) { accessories, _, services in
                    accessories.udevEventsReady(services: services)
                })
            for subsystem in Self.subsystems {
                for device in try udev.devices(subsystem: subsystem) {
                    deviceAdded(device, services: services)
                }
            }
        } catch {
            udevProblem = "\(error)"
            services.logger.error("accessories disabled: cannot use udev: \(error)")
        }
        connectPortKeeper(services: services)
        restoreSessions(services: services)
    }

    /// Closes the ports. Leaving the apps, the port keeper goes on holding
    /// them for the next daemon, as the apps are left for it to adopt, but
    /// not locked: a person who stopped vigild may open the device meanwhile
    /// (the next daemon locks it again). Otherwise the keeper ends with them.
    func stop<S: DaemonServices>(leavingApps: Bool, services: isolated S) async {
        if leavingApps {
            if portKeeper != nil {
                for port in ports.values { port.port.releaseExclusivity() }
            }
            disconnectPortKeeper()
        }
        let streams = services.component(StreamSessions.self)
        for id in ports.keys.sorted() { streams?.detach(id, services: services) }
        if !leavingApps { endPortKeeper() }
        if let monitorWatch { services.loop.removeWatch(monitorWatch) }
        monitorWatch = nil
    }

    /// For `status`: whether accessories are found and followed, and the port keeper.
    func addStatus<S: DaemonServices>(to status: inout DaemonStatus, services: isolated S) {
        status.udev = udevHealth
        status.portKeeper = portKeeperStatus(services: services)
    }

    /// Without systemd-udevd (its control socket missing) enumeration still
    /// works, but no hot-plug event and no rule's properties arrive;
    /// umockdev's testbed plays udevd for the tests.
    var udevHealth: UdevHealth {
        guard monitor != nil else {
            return UdevHealth(condition: .unavailable, detail: "cannot use udev (\(udevProblem ?? "not started")): no accessories are found")
        }
        let accessories = registry.connected.count
        let environment = ProcessInfo.processInfo.environment
        if environment["UMOCKDEV_DIR"] == nil, !FileManager.default.fileExists(atPath: "/run/udev/control") {
            return UdevHealth(
                condition: .noUdevd,
                detail: "no /run/udev/control: \(accessories) accessory(ies) found at start; hot-plug events and udev rules' properties do not arrive")
        }
        return UdevHealth(condition: .ok, detail: "following hot-plug; \(accessories) accessory(ies) connected")
    }

    // MARK: Hot-plug

    private func udevEventsReady<S: DaemonServices>(services: isolated S) {
        while let device = monitor?.receive() {
            switch device.action {
            // `change` too: re-applied rules (udevadm trigger --action=change) may
            // have just made an existing device an accessory.
            case .add, .change: deviceAdded(device, services: services)
            case .remove: deviceRemoved(sysPath: device.sysPath, services: services)
            default: break
            }
        }
    }

    private func deviceAdded<S: DaemonServices>(_ device: UdevDevice, services: isolated S) {
        guard let node = device.devNode else { return }
        let logger = services.logger
        let observation = DeviceObservation(
            sysPath: device.sysPath, devNode: node, kind: device.subsystem == "hidraw" ? .hid : .serial,
            properties: device.properties, devLinks: device.devLinks,
            usb: device.usb.map {
                USBIdentity(
                    vendorID: hex4($0.vendorID), productID: hex4($0.productID),
                    serialNumber: $0.serialNumber, manufacturer: $0.manufacturer, product: $0.product, revision: $0.deviceRevision)
            })
        guard let accessory = registry.added(observation) else { return }
        let id = accessory.info.connectionID
        logger.info("accessory connected: \(DeviceText.quoted(accessory.info.name)) (\(DeviceText.escaped(accessory.identity.key))) at \(DeviceText.escaped(node)), connection \(id)")
        for refusal in accessory.refusedProtocols {
            logger.warning("accessory connection \(id): protocol string \(DeviceText.quoted(refusal.value)) refused, not offered: \(refusal.reason)")
        }
        let others = registry.sharingIdentity(with: accessory)
        if !others.isEmpty {
            logger.warning("accessory connection \(id) at \(DeviceText.escaped(node)) claims the same identity (\(DeviceText.escaped(accessory.identity.key))) as connection \(others.map { "\($0.info.connectionID) at \(DeviceText.escaped($0.info.deviceNode))" }.joined(separator: ", ")): both are kept, and a session waiting for this identity reopens only on its own USB port")
        }
        notifyWatchers("connected", accessory.info, services: services)
        services.recordDevice(kind: "accessory", device: Self.deviceName(accessory.info), change: "connected",
                              detail: "connection \(id) at \(accessory.info.deviceNode)")
        for app in notifiedApps(about: accessory.info, services: services) {
            deliverAccessoryEvent(AccessoryEventKind.connected, accessory.info, to: app, services: services)
        }
        reopenSessions(for: accessory, services: services)
    }

    private func deviceRemoved<S: DaemonServices>(sysPath: String, services: isolated S) {
        guard let accessory = registry.removed(sysPath: sysPath) else { return }
        let id = accessory.info.connectionID
        services.logger.info("accessory disconnected: \(DeviceText.quoted(accessory.info.name)), connection \(id)")
        // Sessions the hang-up already ended (and kept for reopening) are not ended
        // twice; those still trying to reopen on this connection wait for the next.
        for session in table.sessions(of: id) {
            if isOpen(session.id) {
                endSession(session.id, reason: "the accessory was unplugged", keepForReopen: session.reopen, services: services)
            } else {
                cancelReopen(session.id, services: services)
            }
        }
        notifyWatchers("disconnected", accessory.info, services: services)
        services.recordDevice(kind: "accessory", device: Self.deviceName(accessory.info), change: "disconnected",
                              detail: "connection \(id) at \(accessory.info.deviceNode)")
        for app in notifiedApps(about: accessory.info, services: services) {
            // A connect the app has not seen yet and this disconnect cancel out.
            let withdrawn = services.withEngine { engine, _ in
                engine.withdraw(from: app, reason: "accessory connection \(id) came and went while the app could not receive it") {
                    $0.kind == AccessoryEventKind.connected && $0.attributes["connectionID"] == .number(Double(id))
                }
            }
            if withdrawn.isEmpty {
                deliverAccessoryEvent(AccessoryEventKind.disconnected, accessory.info, to: app, services: services)
            }
        }
    }

    // MARK: Notifications

    /// Registered apps that may see the accessory and are not muted.
    private func notifiedApps<S: DaemonServices>(about accessory: AccessoryInfo, services: isolated S) -> [String] {
        registeredApps.subtracting(mutedApps).sorted().filter { canSee($0, accessory, services: services) }
    }

    /// Apps see only accessories that speak a protocol their manifest declares.
    func canSee<S: DaemonServices>(_ app: String, _ accessory: AccessoryInfo, services: isolated S) -> Bool {
        guard let manifest = services.engine.apps[app]?.manifest else { return false }
        return !Set(manifest.accessoryProtocols).isDisjoint(with: accessory.protocolStrings)
    }

    func deliverAccessoryEvent<S: DaemonServices>(_ kind: String, _ accessory: AccessoryInfo, to app: String, services: isolated S) {
        let event = QueuedEvent(kind: kind, attributes: accessory.attributes, wakeMode: .externalAccessory)
        do {
            try services.withEngine { engine, now throws(ProtocolError) in _ = try engine.deliver(event, to: app, now: now) }
        } catch {
            services.logger.warning("\(kind) for \(app) not queued: \(error)", metadata: ["app": "\(app)"])
        }
    }

    /// How the timeline names an accessory: its name, and its serial number when it has one.
    static func deviceName(_ accessory: AccessoryInfo) -> String {
        accessory.serialNumber.isEmpty ? accessory.name : "\(accessory.name) \(accessory.serialNumber)"
    }

    private func notifyWatchers<S: DaemonServices>(_ change: String, _ accessory: AccessoryInfo, services: isolated S) {
        for id in watchers.sorted() {
            guard let connection = services.connection(id) else {
                watchers.remove(id)
                continue
            }
            services.send(AccessoryEvent(change: change, accessory: accessory), to: connection)
        }
    }

    /// Accessory notifications for apps without `external-accessory`: their
    /// sessions close as they leave the foreground, and they hear disconnect
    /// and connect as they leave and return. (Every session of an app that
    /// stops running ends in the stream layer.)
    func appStateChanged<S: DaemonServices>(_ app: String, from old: AppState, to new: AppState, services: isolated S) {
        if new.isRunning { deliverHeldLineChanges(of: app, services: services) }
        if new == .notRunning {
            mutedApps.remove(app)
            return
        }
        guard let manifest = services.engine.apps[app]?.manifest, !manifest.backgroundModes.contains(.externalAccessory) else { return }
        if old.isForeground && !new.isForeground {
            for session in table.sessions(heldBy: .app(app)) {
                endSession(session.id, reason: "the app left the foreground without the external-accessory background mode",
                           keepForReopen: false, services: services)
            }
            if registeredApps.contains(app) {
                for accessory in registry.all where canSee(app, accessory, services: services) {
                    deliverAccessoryEvent(AccessoryEventKind.disconnected, accessory, to: app, services: services)
                }
                mutedApps.insert(app)
            }
        } else if new.isForeground, mutedApps.remove(app) != nil {
            for accessory in registry.all where canSee(app, accessory, services: services) {
                deliverAccessoryEvent(AccessoryEventKind.connected, accessory, to: app, services: services)
            }
        }
    }

    func connectionClosed<S: DaemonServices>(_ connection: ClientConnection, services: isolated S) {
        watchers.remove(connection.id)
    }

    // MARK: Requests

    /// Accessory requests, shared by apps and control clients (who differ
    /// only in what they may see and whether their data goes through the
    /// event queue). `write` and `closeSession` are the stream layer's.
    func handle<S: DaemonServices>(
        _ message: IncomingMessage, from requester: Requester, on connection: ClientConnection, services: isolated S
    ) throws(ProtocolError) {
        let app = requester.app
        let holder: SessionHolder = app.map { .app($0) } ?? .control(connection.id)
        switch message.type {
        case ListAccessories.type:
            services.send(accessoryList(for: app, services: services), id: message.id, to: connection)
        case RegisterForAccessoryNotifications.type:
            guard let app else { throw ProtocolError(.invalidArgument, "control clients use watchAccessories", id: message.id) }
            let request: RegisterForAccessoryNotifications = try message.decode()
            if request.enabled {
                registeredApps.insert(app)
            } else {
                registeredApps.remove(app)
            }
            services.send(Done(), id: message.id, to: connection)
        case WatchAccessories.type:
            guard app == nil else { throw ProtocolError(.invalidArgument, "apps use registerForAccessoryNotifications", id: message.id) }
            watchers.insert(connection.id)
            services.send(accessoryList(for: nil, services: services), id: message.id, to: connection)
        case SetSessionLines.type, SendBreak.type, WatchSessionLines.type, SetSessionRS485.type:
            try handleLineRequest(message, holder: holder, on: connection, services: services)
        case GetHIDReportDescriptor.type, GetHIDFeatureReport.type, SetHIDFeatureReport.type:
            try handleHIDRequest(message, holder: holder, on: connection, services: services)
        case OpenSession.type:
            let request: OpenSession = try message.decode()
            if let app, let accessory = registry.accessory(request.connectionID)?.info, !canSee(app, accessory, services: services) {
                throw ProtocolError(.notPermitted, "the app's manifest declares none of the protocols of accessory \(request.connectionID) (\(accessory.protocolStrings))", id: message.id)
            }
            services.send(try openSession(request, holder: holder, services: services), id: message.id, to: connection)
        default:
            throw ProtocolError(.unknownMessage, "unknown message type '\(message.type)'", id: message.id)
        }
    }

    /// The accessory list, for apps filtered to what they may see; a control
    /// client also gets every session (of every transport) and the problems.
    func accessoryList<S: DaemonServices>(for app: String?, services: isolated S) -> AccessoryList {
        let accessories = registry.all.filter { app == nil || canSee(app!, $0, services: services) }
        guard app == nil else { return AccessoryList(accessories: accessories) }
        return AccessoryList(
            accessories: accessories, sessions: services.component(StreamSessions.self)?.infos() ?? [],
            problems: registry.problems)
    }
}
