import VigilBluetooth
import VigilLifecycle
import VigilProtocol

/// The central role's events, carried to apps through their event queues
/// (waking them with `bluetooth-central`) and to vigilctl as pushes.
extension DaemonCore: BluetoothDelegate {
    nonisolated func bluetooth(emit kind: String, attributes: [String: JSONValue], body: [UInt8], mode: BackgroundMode, to client: BluetoothClient) {
        assumeIsolated { $0.deliverBluetoothEvent(kind, attributes, body, mode: mode, to: client) }
    }

    nonisolated func bluetoothClientIsForeground(_ client: BluetoothClient) -> Bool {
        assumeIsolated { core in
            switch client {
            case let .app(id): core.engine.apps[id]?.state.isForeground ?? false
            case .control: true
            }
        }
    }
}

extension DaemonCore {
    func startBluetooth(restoring saved: SavedBluetooth?) {
        guard config.bluetooth else {
            logger.info("bluetooth: disabled by the config")
            return
        }
        let logger = self.logger
        let central = BluetoothCentral(loop: loop, log: { logger.info("\($0)") })
        let peripheral = BluetoothPeripheral(
            loop: loop, central: central, requestTimeout: .milliseconds(Int(config.bluetoothRequestTimeout * 1000)),
            log: { logger.info("\($0)") })
        self.central = central
        self.peripheral = peripheral
        peripheral.assumeIsolated { peripheral in
            peripheral.setDelegate(self)
            if let saved { peripheral.restore(saved.peripheral) }
        }
        central.assumeIsolated { central in
            if let saved { central.restore(saved.central) }
            central.setDelegate(self)
            central.attach(peripheral)
            central.start()
        }
    }

    /// For `status`: usable, or which of bus, bluetoothd, adapter and power is missing.
    var bluetoothHealth: BluetoothHealth {
        guard let central else {
            return BluetoothHealth(condition: .disabled, detail: "disabled in the daemon's config (bluetooth = false)")
        }
        return central.assumeIsolated { $0.health }
    }

    /// What apps asked of Bluetooth, for the state file (nil when disabled).
    func savedBluetooth() -> SavedBluetooth? {
        guard let central, let peripheral else { return nil }
        var saved = SavedBluetooth()
        saved.central = central.assumeIsolated { $0.saved() }
        saved.peripheral = peripheral.assumeIsolated { $0.saved() }
        // `l2cap` is the L2CAP component's (`save(into:)`).
        return saved
    }

    /// Waits for the central's stop: it hands BlueZ back its AcquireNotify
    /// sockets before the bus connection closes (see `releaseAcquiredNotifications`).
    func stopBluetooth() async {
        guard let central else { return }
        self.central = nil
        peripheral = nil
        await central.stop()
    }

    func deliverBluetoothEvent(_ kind: String, _ attributes: [String: JSONValue], _ body: [UInt8], mode: BackgroundMode, to client: BluetoothClient) {
        if kind == BluetoothEventKind.connected || kind == BluetoothEventKind.disconnected,
           case let .string(address)? = attributes["peripheral"] {
            let reason: String = if case let .string(text)? = attributes["reason"] { text } else { "" }
            recordDevice(kind: "bluetooth", device: address, change: kind == BluetoothEventKind.connected ? "connected" : "disconnected",
                         detail: reason)
        }
        switch client {
        case let .control(connectionID):
            if let connection = connections[connectionID] {
                send(BluetoothPush(kind: kind, attributes: attributes), body: body, to: connection)
            }
            if kind == BluetoothEventKind.connected, case let .string(address)? = attributes["peripheral"] {
                componentsBluetoothLinkConnected(address, client: client)
            }
        case let .app(app):
            let event = QueuedEvent(kind: kind, attributes: attributes, payload: body, wakeMode: mode)
            do {
                try withEngine { engine, now throws(ProtocolError) in _ = try engine.deliver(event, to: app, now: now) }
            } catch {
                // Counted, logged and reported to the app as an overflow by the engine.
                logger.warning("bluetooth: '\(kind)' for \(app) not queued: \(error)", metadata: ["app": "\(app)"])
            }
            if kind == BluetoothEventKind.connected, case let .string(address)? = attributes["peripheral"] {
                componentsBluetoothLinkConnected(address, client: client)  // after the app's ble.connected
            }
        }
    }

    /// The app's process is gone. Its Bluetooth use is kept for a relaunch
    /// (with a restore identifier) unless the user force-quit it.
    func bluetoothAppEnded(_ app: String) {
        guard let central else { return }
        let keep = !(engine.apps[app]?.forceQuit ?? true)
        central.assumeIsolated { $0.clientEnded(.app(app), keep: keep) }
        if let peripheral { loop.task { await peripheral.clientEnded(.app(app), keep: keep) } }
    }

    /// A launch not by the user names the central managers the daemon kept
    /// for the app, so it recreates them (CoreBluetooth's launch options).
    func withRestoreIdentifiers(_ launch: LaunchOptions?, of app: String) -> LaunchOptions? {
        guard var launch, launch.reason != .user, let central, let peripheral else { return launch }
        launch.restoreIdentifiers = central.assumeIsolated { $0.restoreIdentifiers(of: .app(app)) }
            + peripheral.assumeIsolated { $0.restoreIdentifiers(of: .app(app)) }
        return launch
    }

    func bluetoothControlClosed(_ connectionID: Int) {
        central?.assumeIsolated { $0.clientEnded(.control(connectionID), keep: false) }
        if let peripheral { loop.task { await peripheral.clientEnded(.control(connectionID), keep: false) } }
    }
}
