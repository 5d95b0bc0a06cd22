import VigilProtocol

/// What apps asked of Bluetooth, as the daemon's state file keeps it: a
/// restarted daemon re-establishes their links, subscriptions, scans,
/// services and advertising, and a relaunched app can still restore them.
/// Control clients' use ends with their connection and is not saved.
public struct SavedBluetooth: Codable, Sendable, Equatable {
    public var central: [String: SavedCentral] = [:]
    public var peripheral: [String: SavedPeripheral] = [:]
    /// Absent in files of daemons before L2CAP intents were saved.
    public var l2cap: [String: SavedL2CAP]?
    /// Absent in files of daemons before RFCOMM services were saved.
    public var rfcomm: [String: SavedRFCOMM]?
    public init() {}
}

/// An app's published serial port services (`RFCOMMComponent+Services.swift`):
/// a restarted daemon publishes them again, so a device still reaches the
/// app through the same SDP record.
public struct SavedRFCOMM: Codable, Sendable, Equatable {
    public var services: [SavedSerialService]

    public init(services: [SavedSerialService] = []) {
        self.services = services
    }
}

public struct SavedSerialService: Codable, Sendable, Equatable {
    public var uuid: String
    public var channel: Int?
    public var name: String
    public var requireAuthentication: Bool
    public var coalesceMilliseconds: Int

    public init(uuid: String, channel: Int?, name: String, requireAuthentication: Bool, coalesceMilliseconds: Int) {
        self.uuid = uuid
        self.channel = channel
        self.name = name
        self.requireAuthentication = requireAuthentication
        self.coalesceMilliseconds = coalesceMilliseconds
    }
}

/// An app's L2CAP intents: the PSMs it published and its channels opened with
/// `reopen`. The daemon owns the sockets (`L2CAPComponent+Restore.swift`);
/// after a restart it listens on the same PSMs again and reopens the channels
/// on their sessions once their links are back.
public struct SavedL2CAP: Codable, Sendable, Equatable {
    public var published: [SavedPSM]
    public var channels: [SavedChannel]

    public init(published: [SavedPSM] = [], channels: [SavedChannel] = []) {
        self.published = published
        self.channels = channels
    }
}

/// A published PSM, with what it was published with.
public struct SavedPSM: Codable, Sendable, Equatable {
    public var psm: Int
    /// Published without a PSM (the kernel picked it): publishing again
    /// without one, with the same options, gets this one back.
    public var dynamic: Bool
    public var security: String?
    public var receiveMTU: Int
    public var coalesceMilliseconds: Int

    public init(psm: Int, dynamic: Bool, security: String?, receiveMTU: Int, coalesceMilliseconds: Int) {
        self.psm = psm
        self.dynamic = dynamic
        self.security = security
        self.receiveMTU = receiveMTU
        self.coalesceMilliseconds = coalesceMilliseconds
    }
}

/// A channel opened with `reopen`: opened again on the same session.
public struct SavedChannel: Codable, Sendable, Equatable {
    public var session: Int
    public var peer: String
    public var psm: Int
    public var security: String?
    public var receiveMTU: Int
    public var coalesceMilliseconds: Int

    public init(session: Int, peer: String, psm: Int, security: String?, receiveMTU: Int, coalesceMilliseconds: Int) {
        self.session = session
        self.peer = peer
        self.psm = psm
        self.security = security
        self.receiveMTU = receiveMTU
        self.coalesceMilliseconds = coalesceMilliseconds
    }
}

public struct SavedCentral: Codable, Sendable, Equatable {
    public var restoreIdentifier: String?
    public var connects: [String]
    public var subscriptions: [SavedSubscription]
    /// nil: not scanning; [] with `scanAll`: every peripheral.
    public var scanServices: [String]?
    public var scanAll: Bool
    public var allowDuplicates: Bool
    /// Advertisement monitors (absent from state files older than monitors).
    public var monitors: [StartMonitor]?
    /// The adapter (address) the scan named; absent: the default.
    public var scanAdapter: String?
    /// Peripheral address -> adapter address, for connects that named one.
    public var connectAdapters: [String: String]?
    /// Pairing intents: peripherals the app asked to pair with whose
    /// `ble.pair` was not answered when this was saved (absent: none, and in
    /// files older than 2026-11-28).
    public var pairs: [String]?
}

public struct SavedSubscription: Codable, Sendable, Equatable {
    public var path: CharacteristicPath
    /// `ble.notify`'s `acquire`: absent for the daemon's choice (AcquireNotify
    /// where it works). State files older than 2026-11-25 always hold a bool
    /// (`false` was then the default): such subscriptions keep StartNotify.
    public var acquire: Bool?
}

public struct SavedPeripheral: Codable, Sendable, Equatable {
    public var restoreIdentifier: String?
    public var services: [GATTServiceDefinition]
    public var advertisement: AdvertisementData?
    /// Service UUID -> adapter (address), for services published on a chosen adapter.
    public var serviceAdapters: [String: String]?
    /// The adapter (address) the advertisement chose; absent: the default.
    public var advertisementAdapter: String?
}

extension BluetoothCentral {
    public func saved() -> [String: SavedCentral] {
        var result: [String: SavedCentral] = [:]
        for (client, state) in clients {
            guard case let .app(id) = client, !state.isEmpty || state.restoreIdentifier != nil else { continue }
            result[id] = SavedCentral(
                restoreIdentifier: state.restoreIdentifier, connects: state.connects.sorted(),
                subscriptions: state.subscriptions.map { SavedSubscription(path: $0.key, acquire: $0.value.acquire) }
                    .sorted { $0.path < $1.path },
                scanServices: state.scan.map { ($0.services ?? []).sorted() }, scanAll: state.scan?.services == nil,
                allowDuplicates: state.scan?.allowDuplicates ?? false,
                monitors: state.monitors.isEmpty ? nil : state.monitors.values.map(\.request).sorted { $0.monitor < $1.monitor },
                scanAdapter: state.scan?.adapter,
                connectAdapters: state.connectAdapters.isEmpty ? nil : state.connectAdapters,
                pairs: state.pairs.isEmpty ? nil : state.pairs.sorted())
        }
        return result
    }

    /// Before BlueZ is loaded: the intents come back; `reconcileEverything`
    /// acts on them once the mirror is there.
    public func restore(_ saved: [String: SavedCentral]) {
        for (id, app) in saved {
            var state = CentralClientState(restoreIdentifier: app.restoreIdentifier)
            state.connects = Set(app.connects)
            state.connectAdapters = (app.connectAdapters ?? [:]).filter { state.connects.contains($0.key) }
            for subscription in app.subscriptions { state.subscriptions[subscription.path] = NotifyPreference(acquire: subscription.acquire) }
            if let services = app.scanServices {
                state.scan = .init(services: app.scanAll ? nil : Set(services), allowDuplicates: app.allowDuplicates, adapter: app.scanAdapter)
            }
            for request in app.monitors ?? [] {
                if let monitor = try? AdvertisementMonitor(request) { state.monitors[request.monitor] = monitor }
            }
            state.pairs = Set(app.pairs ?? [])
            clients[.app(id)] = state
        }
        if !saved.isEmpty { log("bluetooth: restored the central use of \(saved.count) app(s) from the state file") }
    }
}

extension BluetoothPeripheral {
    public func saved() -> [String: SavedPeripheral] {
        var result: [String: SavedPeripheral] = [:]
        for (client, state) in clients {
            guard case let .app(id) = client, !state.isEmpty else { continue }
            var adapters: [String: String] = [:]
            for service in state.services { adapters[service.definition.uuid] = service.adapter }
            result[id] = SavedPeripheral(
                restoreIdentifier: state.restoreIdentifier, services: state.services.map(\.definition),
                advertisement: state.advertisement?.data, serviceAdapters: adapters.isEmpty ? nil : adapters,
                advertisementAdapter: state.advertisement?.adapter)
        }
        return result
    }

    /// Services and advertisements come back unpublished; `bluezReady`
    /// publishes them once BlueZ is there.
    public func restore(_ saved: [String: SavedPeripheral]) {
        for (id, app) in saved {
            let client = BluetoothClient.app(id)
            var state = PeripheralClientState(restoreIdentifier: app.restoreIdentifier)
            for definition in app.services {
                guard let root = try? objectPath("/org/vigil/gatt/\(token(client))/app\(nextServiceNumber)") else { continue }
                nextServiceNumber += 1
                let service = PublishedService(definition: definition, root: root)
                service.adapter = app.serviceAdapters?[definition.uuid]
                state.services.append(service)
            }
            if let data = app.advertisement, let path = try? objectPath("/org/vigil/advertising/\(token(client))") {
                state.advertisement = PublishedAdvertisement(data: data, path: path)
                state.advertisement?.adapter = app.advertisementAdapter
            }
            clients[client] = state
        }
        if !saved.isEmpty { log("bluetooth: restored the services of \(saved.count) app(s) from the state file") }
    }
}
