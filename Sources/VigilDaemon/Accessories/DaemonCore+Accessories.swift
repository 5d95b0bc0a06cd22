import FoundationEssentials
import Glibc
import VigilAccessories
import VigilConfig
import VigilLifecycle
import VigilProtocol
import VigilSerial
import VigilSystem
import VigilUdev

/// Accessories found and followed through udev, and their notifications.
extension DaemonCore {
    /// Enumerates serial devices, then follows hot-plug. Without udev the
    /// daemon runs on, with no accessories.
    func startAccessories() {
        var state = AccessoryState(rules: config.accessoryRules, bufferLimit: config.sessionBufferLimit)
        do {
            let udev = try Udev()
            let monitor = try UdevMonitor(udev: udev, subsystems: ["tty"])
            state.udev = udev
            state.monitor = monitor
            state.monitorWatch = try loop.watch(monitor.fd, for: .readable) { [unowned self] _ in
                self.assumeIsolated { $0.udevEventsReady() }
            }
            accessoryState = state
            for device in try udev.devices(subsystem: "tty") {
                deviceAdded(device)
            }
        } catch {
            state.udevProblem = "\(error)"
            accessoryState = state
            logger.error("accessories disabled: cannot use udev: \(error)")
        }
    }

    /// For `status`: whether accessories are found and followed. Without
    /// systemd-udevd (its control socket missing) enumeration still works, but
    /// no hot-plug event and no rule's properties arrive; umockdev's testbed
    /// plays udevd for the tests.
    var udevHealth: UdevHealth {
        guard accessoryState.monitor != nil else {
            return UdevHealth(
                condition: .unavailable,
                detail: "cannot use udev (\(accessoryState.udevProblem ?? "not started")): no accessories are found")
        }
        let accessories = accessoryState.registry.connected.count
        let environment = ProcessInfo.processInfo.environment
        if environment["UMOCKDEV_DIR"] == nil, !FileManager.default.fileExists(atPath: "/run/udev/control") {
            return UdevHealth(
                condition: .noUdevd,
                detail: "no /run/udev/control: \(accessories) accessory(ies) found at start; hot-plug events and udev rules' properties do not arrive")
        }
        return UdevHealth(condition: .ok, detail: "following hot-plug; \(accessories) accessory(ies) connected")
    }

    /// Closes the ports. Leaving them kept, the port keeper goes on holding
    /// them for the next daemon, as the apps are left for it to adopt, but
    /// not locked: a person who stopped vigild may open the device meanwhile
    /// (the next daemon locks it again). Otherwise the keeper ends with them.
    func stopAccessories(leavingPortsKept: Bool) {
        if leavingPortsKept {
            if accessoryState.portKeeper != nil {
                for port in accessoryState.ports.values { port.port.releaseExclusivity() }
            }
            disconnectPortKeeper()
        }
        for id in accessoryState.ports.keys.sorted() { closePort(id) }
        if !leavingPortsKept { endPortKeeper() }
        if let watch = accessoryState.monitorWatch { loop.removeWatch(watch) }
        accessoryState.monitorWatch = nil
    }

    private func udevEventsReady() {
        while let device = accessoryState.monitor?.receive() {
            switch device.action {
            // `change` too: re-applied rules (udevadm trigger --action=change) may
            // have just made an existing device an accessory.
            case .add, .change: deviceAdded(device)
            case .remove: deviceRemoved(sysPath: device.sysPath)
            default: break
            }
        }
    }

    private func deviceAdded(_ device: UdevDevice) {
        guard let node = device.devNode else { return }
        let observation = DeviceObservation(
            sysPath: device.sysPath, devNode: node, properties: device.properties, devLinks: device.devLinks,
            usb: device.usb.map {
                USBIdentity(
                    vendorID: hex4($0.vendorID), productID: hex4($0.productID),
                    serialNumber: $0.serialNumber, manufacturer: $0.manufacturer, product: $0.product, revision: $0.deviceRevision)
            })
        guard let accessory = accessoryState.registry.added(observation) else { return }
        let id = accessory.info.connectionID
        logger.info("accessory connected: \(DeviceText.quoted(accessory.info.name)) (\(DeviceText.escaped(accessory.identity.key))) at \(DeviceText.escaped(node)), connection \(id)")
        for refusal in accessory.refusedProtocols {
            logger.warning("accessory connection \(id): protocol string \(DeviceText.quoted(refusal.value)) refused, not offered: \(refusal.reason)")
        }
        let others = accessoryState.registry.sharingIdentity(with: accessory)
        if !others.isEmpty {
            logger.warning("accessory connection \(id) at \(DeviceText.escaped(node)) claims the same identity (\(DeviceText.escaped(accessory.identity.key))) as connection \(others.map { "\($0.info.connectionID) at \(DeviceText.escaped($0.info.deviceNode))" }.joined(separator: ", ")): both are kept, and a session waiting for this identity reopens only on its own USB port")
        }
        notifyWatchers("connected", accessory.info)
        recordDevice(kind: "accessory", device: Self.deviceName(accessory.info), change: "connected",
                     detail: "connection \(id) at \(accessory.info.deviceNode)")
        for app in notifiedApps(about: accessory.info) {
            deliverAccessoryEvent(AccessoryEventKind.connected, accessory.info, to: app)
        }
        reopenSessions(for: accessory)
    }

    private func deviceRemoved(sysPath: String) {
        guard let accessory = accessoryState.registry.removed(sysPath: sysPath) else { return }
        let id = accessory.info.connectionID
        logger.info("accessory disconnected: \(DeviceText.quoted(accessory.info.name)), connection \(id)")
        // Sessions the hang-up already ended (and kept for reopening) are not ended
        // twice; those still trying to reopen on this connection wait for the next.
        for session in accessoryState.sessions.sessions(of: id) {
            if accessoryState.ports[session.id] != nil {
                endSession(session.id, reason: "the accessory was unplugged", keepForReopen: session.reopen)
            } else {
                cancelReopen(session.id)
            }
        }
        notifyWatchers("disconnected", accessory.info)
        recordDevice(kind: "accessory", device: Self.deviceName(accessory.info), change: "disconnected",
                     detail: "connection \(id) at \(accessory.info.deviceNode)")
        for app in notifiedApps(about: accessory.info) {
            // A connect the app has not seen yet and this disconnect cancel out.
            let withdrawn = withEngine { engine, _ in
                engine.withdraw(from: app, reason: "accessory connection \(id) came and went while the app could not receive it") {
                    $0.kind == AccessoryEventKind.connected && $0.attributes["connectionID"] == .number(Double(id))
                }
            }
            if withdrawn.isEmpty {
                deliverAccessoryEvent(AccessoryEventKind.disconnected, accessory.info, to: app)
            }
        }
    }

    /// Registered apps that may see the accessory and are not muted.
    private func notifiedApps(about accessory: AccessoryInfo) -> [String] {
        accessoryState.registeredApps.subtracting(accessoryState.mutedApps).sorted().filter { canSee($0, accessory) }
    }

    /// Apps see only accessories that speak a protocol their manifest declares.
    func canSee(_ app: String, _ accessory: AccessoryInfo) -> Bool {
        guard let manifest = engine.apps[app]?.manifest else { return false }
        return !Set(manifest.accessoryProtocols).isDisjoint(with: accessory.protocolStrings)
    }

    func deliverAccessoryEvent(_ kind: String, _ accessory: AccessoryInfo, to app: String) {
        let event = QueuedEvent(kind: kind, attributes: accessory.attributes, wakeMode: .externalAccessory)
        do {
            try withEngine { engine, now throws(ProtocolError) in _ = try engine.deliver(event, to: app, now: now) }
        } catch {
            logger.warning("\(kind) for \(app) not queued: \(error)", metadata: ["app": "\(app)"])
        }
    }

    /// How the timeline names an accessory: its name, and its serial number when it has one.
    static func deviceName(_ accessory: AccessoryInfo) -> String {
        accessory.serialNumber.isEmpty ? accessory.name : "\(accessory.name) \(accessory.serialNumber)"
    }

    private func notifyWatchers(_ change: String, _ accessory: AccessoryInfo) {
        for id in accessoryState.watchers.sorted() {
            guard let connection = connections[id] else {
                accessoryState.watchers.remove(id)
                continue
            }
            send(AccessoryEvent(change: change, accessory: accessory), to: connection)
        }
    }

    /// Accessory notifications for apps without `external-accessory`: their
    /// sessions close as they leave the foreground, and they hear disconnect
    /// and connect as they leave and return.
    func accessoriesAppStateChanged(_ app: String, from old: AppState, to new: AppState) {
        if new == .notRunning {
            // The process that held these sessions is gone; a new one opens its own.
            // Its unacknowledged data stays queued and is redelivered.
            accessoryState.mutedApps.remove(app)
            for session in accessoryState.sessions.sessions(heldBy: .app(app)) {
                endSession(session.id, reason: "the app is no longer running", keepForReopen: false, notify: false)
            }
            return
        }
        if new == .suspended { wakeIfHeldBack(app) }
        guard let manifest = engine.apps[app]?.manifest, !manifest.backgroundModes.contains(.externalAccessory) else { return }
        if old.isForeground && !new.isForeground {
            for session in accessoryState.sessions.sessions(heldBy: .app(app)) where !isChannel(session.id) {
                endSession(session.id, reason: "the app left the foreground without the external-accessory background mode", keepForReopen: false)
            }
            if new != .notRunning, accessoryState.registeredApps.contains(app) {
                for accessory in accessoryState.registry.all where canSee(app, accessory) {
                    deliverAccessoryEvent(AccessoryEventKind.disconnected, accessory, to: app)
                }
                accessoryState.mutedApps.insert(app)
            }
        } else if new.isForeground, accessoryState.mutedApps.remove(app) != nil {
            for accessory in accessoryState.registry.all where canSee(app, accessory) {
                deliverAccessoryEvent(AccessoryEventKind.connected, accessory, to: app)
            }
        }
    }

    /// The accessory list, for apps filtered to what they may see.
    func accessoryList(for app: String?) -> AccessoryList {
        let accessories = accessoryState.registry.all.filter { app == nil || canSee(app!, $0) }
        guard app == nil else { return AccessoryList(accessories: accessories) }
        return AccessoryList(
            accessories: accessories, sessions: accessoryState.sessions.sessions.keys.sorted().compactMap(sessionInfo),
            problems: accessoryState.registry.problems)
    }
}
