import Glibc
import VigilDBus
import VigilProtocol
import VigilSystem

/// One client's advertisement monitor (`ble.monitor.start`): its patterns, and
/// the devices found by it with when each was last heard.
struct AdvertisementMonitor {
    let request: StartMonitor
    let patterns: [CompiledPattern]
    let lostTimeout: Duration
    /// Address -> when a matching advertisement (strong enough) was last heard.
    var found: [String: MonotonicInstant] = [:]
    var lostTimer: TimerID?

    /// Checks the request; throws `invalidArgument` naming what is wrong.
    init(_ request: StartMonitor) throws(ProtocolError) {
        guard (1...64).contains(request.monitor.count), !request.monitor.contains(where: { $0.isNewline }) else {
            throw ProtocolError(.invalidArgument, "a monitor's name must be 1 to 64 characters on one line")
        }
        guard !request.patterns.isEmpty else {
            throw ProtocolError(.invalidArgument, "monitor '\(request.monitor)' has no patterns: it would match every device")
        }
        guard request.patterns.count <= StartMonitor.maxPatterns else {
            throw ProtocolError(.invalidArgument, "monitor '\(request.monitor)' has \(request.patterns.count) patterns; at most \(StartMonitor.maxPatterns)")
        }
        var compiled: [CompiledPattern] = []
        for (index, pattern) in request.patterns.enumerated() {
            do throws(ProtocolError) {
                compiled.append(try CompiledPattern(pattern))
            } catch {
                throw ProtocolError(.invalidArgument, "monitor '\(request.monitor)', pattern \(index + 1): \(error.message)")
            }
        }
        for (name, value) in [("rssiFound", request.rssiFound), ("rssiLost", request.rssiLost)] {
            if let value, !(-127...20).contains(value) {
                throw ProtocolError(.invalidArgument, "\(name) \(value) is not a signal strength in dBm (-127...20)")
            }
        }
        if let found = request.rssiFound, let lost = request.rssiLost, lost > found {
            throw ProtocolError(.invalidArgument, "rssiLost (\(lost)) must not be above rssiFound (\(found))")
        }
        let timeout = request.lostTimeout ?? StartMonitor.defaultLostTimeout
        guard timeout.isFinite, StartMonitor.lostTimeoutRange.contains(timeout) else {
            throw ProtocolError(.invalidArgument, "lostTimeout \(timeout) is outside \(StartMonitor.lostTimeoutRange) seconds")
        }
        self.request = request
        self.patterns = compiled
        self.lostTimeout = .milliseconds(Int(timeout * 1000))
    }

    func matches(_ device: DeviceView) -> Bool {
        patterns.contains { $0.matches(device) }
    }
}

/// A pattern checked once, in the form matching needs.
struct CompiledPattern {
    enum Kind {
        case manufacturer(company: UInt16, prefix: [UInt8])
        case serviceData(uuid: String, prefix: [UInt8])
        case name(prefix: String)
        case serviceUUID(String)
    }

    let kind: Kind

    init(_ pattern: MonitorPattern) throws(ProtocolError) {
        func prefix() throws(ProtocolError) -> [UInt8] {
            guard let text = pattern.prefix, !text.isEmpty else { return [] }
            guard let bytes = GATTHex.bytes(text) else { throw ProtocolError(.invalidArgument, "prefix '\(text)' is not hex") }
            guard bytes.count <= 31 else { throw ProtocolError(.invalidArgument, "a prefix longer than 31 bytes never matches an advertisement") }
            return bytes
        }
        func uuid() throws(ProtocolError) -> String {
            guard let text = pattern.uuid else { throw ProtocolError(.invalidArgument, "a '\(pattern.type)' pattern needs 'uuid'") }
            guard let uuid = BluetoothUUID.normalize(text) else { throw ProtocolError(.invalidArgument, "'\(text)' is not a Bluetooth UUID") }
            return uuid
        }
        switch pattern.type {
        case "manufacturer":
            guard let company = pattern.company else { throw ProtocolError(.invalidArgument, "a 'manufacturer' pattern needs 'company'") }
            guard let id = UInt16(exactly: company) else { throw ProtocolError(.invalidArgument, "company \(company) is not a 16-bit company identifier") }
            kind = .manufacturer(company: id, prefix: try prefix())
        case "service":
            kind = .serviceData(uuid: try uuid(), prefix: try prefix())
        case "name":
            guard let name = pattern.name, !name.isEmpty else { throw ProtocolError(.invalidArgument, "a 'name' pattern needs a non-empty 'name'") }
            kind = .name(prefix: name)
        case "uuid":
            kind = .serviceUUID(try uuid())
        default:
            throw ProtocolError(.invalidArgument, "unknown pattern type '\(pattern.type)' (one of \(MonitorPattern.types.sorted().joined(separator: ", ")))")
        }
    }

    func matches(_ device: DeviceView) -> Bool {
        switch kind {
        case let .manufacturer(company, prefix):
            guard let data = device.manufacturerBytes[company] else { return false }
            return data.starts(with: prefix)
        case let .serviceData(uuid, prefix):
            guard let data = device.serviceDataBytes[uuid] else { return false }
            return data.starts(with: prefix)
        case let .name(prefix):
            return device.name?.hasPrefix(prefix) ?? false
        case let .serviceUUID(uuid):
            return device.serviceUUIDs.contains(uuid)
        }
    }
}

extension DeviceView {
    /// Company id -> data, from `ManufacturerData` (a{qv}).
    var manufacturerBytes: [UInt16: [UInt8]] {
        var result: [UInt16: [UInt8]] = [:]
        for entry in properties["ManufacturerData"]?.dictionaryEntries ?? [] {
            guard let company = entry.key.uint16, let data = entry.value.unwrapped.bytes else { continue }
            result[company] = data
        }
        return result
    }

    /// Canonical service UUID -> data, from `ServiceData` (a{sv}).
    var serviceDataBytes: [String: [UInt8]] {
        var result: [String: [UInt8]] = [:]
        for (uuid, value) in properties["ServiceData"]?.dictionaryStringVariant ?? [:] {
            guard let data = value.unwrapped.bytes else { continue }
            result[BluetoothUUID.normalize(uuid) ?? uuid] = data
        }
        return result
    }

    /// The advertising data BlueZ holds for the device, as AD structures:
    /// local name, service UUIDs, TX power, manufacturer data, service data.
    /// BlueZ keeps what the last advertisements said (not the raw bytes of
    /// one), so this is the device's data as of this advertisement.
    var advertisingStructures: [UInt8] {
        var bytes: [UInt8] = []
        func add(_ type: UInt8, _ data: [UInt8]) {
            let data = data.prefix(254)
            bytes.append(UInt8(data.count + 1))
            bytes.append(type)
            bytes.append(contentsOf: data)
        }
        if let name = properties["Name"]?.string { add(0x09, Array(name.utf8)) }
        var short: [UInt8] = []
        var long: [UInt8] = []
        for uuid in serviceUUIDs {
            if let value = BluetoothUUID.shortValue(uuid) {
                short += [UInt8(value & 0xFF), UInt8(value >> 8)]
            } else if let raw = BluetoothUUID.bytes(uuid) {
                long += raw.reversed()
            }
        }
        if !short.isEmpty { add(0x03, short) }
        if !long.isEmpty { add(0x07, long) }
        if let tx = txPower { add(0x0A, [UInt8(bitPattern: Int8(clamping: tx))]) }
        for (company, data) in manufacturerBytes.sorted(by: { $0.key < $1.key }) {
            add(0xFF, [UInt8(company & 0xFF), UInt8(company >> 8)] + data)
        }
        for (uuid, data) in serviceDataBytes.sorted(by: { $0.key < $1.key }) {
            if let value = BluetoothUUID.shortValue(uuid) {
                add(0x16, [UInt8(value & 0xFF), UInt8(value >> 8)] + data)
            } else if let raw = BluetoothUUID.bytes(uuid) {
                add(0x21, raw.reversed() + data)
            }
        }
        return bytes
    }
}

extension BluetoothCentral {
    /// Starts or replaces the client's monitor of that name. Allowed in the
    /// background: its patterns bound what it matches.
    public func startMonitor(_ client: BluetoothClient, _ request: StartMonitor) throws(ProtocolError) {
        let monitor = try AdvertisementMonitor(request)
        let existing = clients[client]?.monitors ?? [:]
        if existing[request.monitor] == nil, existing.count >= StartMonitor.maxMonitors {
            throw ProtocolError(.notPermitted, "\(client) already has \(StartMonitor.maxMonitors) monitors")
        }
        if let old = existing[request.monitor]?.lostTimer { loop.cancelTimer(old) }
        clients[client, default: CentralClientState()].monitors[request.monitor] = monitor
        reconcileDiscovery()
    }

    public func stopMonitor(_ client: BluetoothClient, name: String) {
        guard let monitor = clients[client]?.monitors.removeValue(forKey: name) else { return }
        if let timer = monitor.lostTimer { loop.cancelTimer(timer) }
        reconcileDiscovery()
    }

    /// The client's monitors, for `ble.monitors` (counts are the component's).
    public func monitors(of client: BluetoothClient) -> [MonitorInfo] {
        (clients[client]?.monitors ?? [:]).sorted { $0.key < $1.key }.map { name, monitor in
            MonitorInfo(
                monitor: name, patterns: monitor.request.patterns, scanning: "active", found: monitor.found.keys.sorted(),
                delivered: 0, lost: 0)
        }
    }

    var monitoring: Bool { clients.values.contains { !$0.monitors.isEmpty } }

    /// An advertisement of `device` (a new device or new advertised
    /// properties): found, a reading, or nothing, for each monitor it matches.
    func monitorAdvertisement(_ device: DeviceView) {
        guard monitoring else { return }
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let receivedAt = UInt64(max(0, now.tv_sec)) * 1_000_000_000 + UInt64(max(0, now.tv_nsec))
        let heardAt = MonotonicInstant.now()
        var record: AdvertisementRecord?
        for (client, state) in clients where !state.monitors.isEmpty {
            for (name, monitor) in state.monitors where monitor.matches(device) {
                let rssi = device.rssi
                if let rssi, let floor = monitor.request.rssiLost, rssi < floor { continue }
                let wasFound = monitor.found[device.address] != nil
                if !wasFound {
                    if let rssi, let threshold = monitor.request.rssiFound, rssi < threshold { continue }
                    if monitor.request.rssiFound != nil, rssi == nil { continue }
                }
                clients[client]?.monitors[name]?.found[device.address] = heardAt
                if !wasFound {
                    var attributes: [String: JSONValue] = ["monitor": .string(name), "peripheral": .string(device.address)]
                    if let rssi { attributes["rssi"] = .number(Double(rssi)) }
                    // The advertised name only: BlueZ's Alias defaults to the address.
                    if let deviceName = device.properties["Name"]?.string { attributes["name"] = .string(deviceName) }
                    delegate?.bluetooth(emit: MonitorEventKind.found, attributes: attributes, body: [], mode: .bluetoothCentral, to: client)
                    armLostTimer(client, name)
                }
                guard monitor.request.advertisements ?? true else { continue }
                if record == nil {
                    record = AdvertisementRecord(
                        receivedAt: receivedAt, address: device.address, randomAddress: device.addressType == "random",
                        rssi: device.rssi, data: device.advertisingStructures)
                }
                if let record { delegate?.bluetooth(advertisement: record, monitor: name, to: client) }
            }
        }
    }

    /// One timer per monitor, at the earliest time a found device may be lost.
    private func armLostTimer(_ client: BluetoothClient, _ name: String) {
        guard let monitor = clients[client]?.monitors[name], monitor.lostTimer == nil,
              let earliest = monitor.found.values.min() else { return }
        let deadline = earliest.advanced(by: monitor.lostTimeout)
        clients[client]?.monitors[name]?.lostTimer = loop.schedule(at: deadline) { [weak self] in
            guard let self else { return }
            self.assumeIsolated { $0.lostTimerFired(client, name) }
        }
    }

    private func lostTimerFired(_ client: BluetoothClient, _ name: String) {
        guard let monitor = clients[client]?.monitors[name] else { return }
        clients[client]?.monitors[name]?.lostTimer = nil
        let now = MonotonicInstant.now()
        for (address, heard) in monitor.found.sorted(by: { $0.key < $1.key }) where heard.advanced(by: monitor.lostTimeout) <= now {
            clients[client]?.monitors[name]?.found[address] = nil
            delegate?.bluetooth(
                emit: MonitorEventKind.lost, attributes: ["monitor": .string(name), "peripheral": .string(address)], body: [],
                mode: .bluetoothCentral, to: client)
        }
        armLostTimer(client, name)
    }
}
