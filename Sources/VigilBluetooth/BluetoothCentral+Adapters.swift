import VigilDBus
import VigilProtocol

/// Which adapter each use of Bluetooth goes through, chosen explicitly and
/// never replaced by another (docs/bluetooth.md, "Adapters").
///
/// The default adapter is the configured one (`bluetooth-adapter`, by name
/// or address) or, without configuration, the first by name when vigild
/// first sees any, kept by address for as long as vigild runs. A request
/// may name another (`adapter` on `ble.scan` and `ble.connect`); that choice
/// is kept by the adapter's address. An adapter that vanishes or is powered
/// off is reported (`ble.state` for the default, `ble.adapterState` for a
/// chosen one) and what was asked of it waits for it.
extension BluetoothCentral {
    /// The default adapter, if present.
    var adapter: AdapterView? {
        if let configuredAdapter { return findAdapter(configuredAdapter) }
        guard let pinnedAdapter else { return nil }
        return tree.adapters.first { $0.address.uppercased() == pinnedAdapter }
    }

    /// Whether `text` can name an adapter: `hciN`, or a Bluetooth address.
    public static func isAdapterSelector(_ text: String) -> Bool {
        if text.hasPrefix("hci"), text.count > 3, text.dropFirst(3).allSatisfy(\.isNumber) { return true }
        return (try? address(text)) != nil
    }

    /// The adapter a name ("hci1") or address names.
    func findAdapter(_ selector: String) -> AdapterView? {
        let upper = selector.uppercased()
        return tree.adapters.first { $0.name == selector || $0.address.uppercased() == upper }
    }

    /// Without a configured adapter: the first adapter by name becomes the
    /// default, once; it stays the default (by address) while vigild runs.
    func pinDefaultAdapter() {
        guard configuredAdapter == nil, pinnedAdapter == nil else { return }
        let candidates = tree.adapters.filter { !$0.address.isEmpty }
        guard let first = candidates.min(by: { ($0.name.count, $0.name) < ($1.name.count, $1.name) }) else { return }
        pinnedAdapter = first.address.uppercased()
        log("bluetooth: default adapter \(first.name) (\(first.address)); kept while vigild runs (`bluetooth-adapter` chooses another)")
    }

    /// A request's `adapter`: nil for the default, else the named adapter's
    /// address (the key that survives its renaming on a replug).
    func chooseAdapter(_ selector: String?) throws(ProtocolError) -> String? {
        guard let selector else { return nil }
        guard Self.isAdapterSelector(selector) else {
            throw ProtocolError(.invalidArgument, "'\(selector)' does not name an adapter (hci0, or its address AA:BB:CC:DD:EE:FF)")
        }
        guard bus != nil, bluezOwner != nil, !loading else {
            throw ProtocolError(.unavailable, "bluetoothd is not running; cannot find adapter '\(selector)'")
        }
        guard let found = findAdapter(selector) else {
            let present = tree.adapters.map(\.name).sorted().joined(separator: ", ")
            throw ProtocolError(.notFound, "no adapter '\(selector)' (BlueZ has: \(present.isEmpty ? "none" : present))")
        }
        return found.address.uppercased()
    }

    /// The adapter of a choice (nil: the default), if present.
    func adapterView(_ choice: String?) -> AdapterView? {
        guard let choice else { return adapter }
        return tree.adapters.first { $0.address.uppercased() == choice }
    }

    /// A choice as an address to compare (nil: the default's, if known).
    func resolvedChoice(_ choice: String?) -> String? {
        choice ?? adapter.map { $0.address.uppercased() } ?? pinnedAdapter
    }

    /// The adapter a peripheral is used through: the one its connect requests
    /// chose (they all agree: see `connect`), else the default.
    func linkAdapter(_ address: String) -> AdapterView? {
        for state in clients.values where state.connects.contains(address) {
            return adapterView(state.connectAdapters[address])
        }
        return adapter
    }

    /// The device object of `address` on its link's adapter; a device of that
    /// address on another adapter is another object vigild does not use for it.
    func device(_ address: String) -> DeviceView? {
        guard let adapter = linkAdapter(address) else { return nil }
        let wanted = address.uppercased()
        return tree.devices.first { $0.address == wanted && $0.adapter == adapter.path }
    }

    /// Whether `device` is the object vigild uses for its address.
    func isLinkDevice(_ device: DeviceView) -> Bool {
        device.adapter != nil && linkAdapter(device.address)?.path == device.adapter
    }

    func adapterName(of device: DeviceView) -> String? {
        device.adapter.flatMap(tree.adapter(at:))?.name
    }

    /// The name to report for a link's adapter (its name, or nil if absent).
    func linkAdapterName(_ address: String) -> String? {
        linkAdapter(address)?.name
    }

    /// The adapters clients chose by name or address, and who uses each.
    private var chosenAdapters: [String: Set<BluetoothClient>] {
        var result: [String: Set<BluetoothClient>] = [:]
        for (client, state) in clients {
            if let choice = state.scan?.adapter { result[choice, default: []].insert(client) }
            for choice in state.connectAdapters.values { result[choice, default: []].insert(client) }
        }
        return result
    }

    private func state(ofChosen choice: String) -> BluetoothState {
        guard let adapter = adapterView(choice) else { return .unsupported }
        return adapter.powered ? .poweredOn : .poweredOff
    }

    /// A chosen adapter is used from now: later changes are reported from its state now.
    func adapterChosen(_ choice: String?) {
        guard let choice, reportedAdapterStates[choice] == nil else { return }
        reportedAdapterStates[choice] = state(ofChosen: choice)
        adapterNames[choice] = adapterView(choice)?.name
    }

    /// Tells the clients of each chosen adapter when it vanished, came back,
    /// or was powered off or on. Not while BlueZ is away or loading (`ble.state`
    /// says `resetting` then): a bluetoothd restart that brings the adapter
    /// back as it was reports nothing.
    func chosenAdaptersMayHaveChanged() {
        guard bus != nil, bluezOwner != nil, !loading else { return }
        let chosen = chosenAdapters
        for choice in reportedAdapterStates.keys where chosen[choice] == nil { reportedAdapterStates[choice] = nil }
        for (choice, users) in chosen {
            let now = state(ofChosen: choice)
            if let name = adapterView(choice)?.name { adapterNames[choice] = name }
            guard let before = reportedAdapterStates[choice], before != now else {
                reportedAdapterStates[choice] = now
                continue
            }
            reportedAdapterStates[choice] = now
            let name = adapterNames[choice] ?? choice
            log("bluetooth: adapter \(name) (\(choice)) \(before.rawValue) -> \(now.rawValue); what \(users.count) client(s) asked of it waits for it")
            for client in users {
                emit(.adapterState(adapter: name, state: now), to: client)
            }
        }
    }
}
