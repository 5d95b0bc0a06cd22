import FoundationEssentials
import Glibc

/// The typed reading of an event (for apps) or a `blePush` (for control
/// clients) whose kind is one of `BluetoothEventKind`: attributes are flat
/// JSON, so every client decodes them the same way. The value of a
/// notification travels in the body, not here.
///
/// The daemon can build the attributes from the same type (`kind`,
/// `attributes`), so both ends agree by construction.
public enum BluetoothEventContent: Sendable, Equatable {
    /// `ble.state`: `state`.
    case state(BluetoothState)
    /// `ble.discovered`: the `PeripheralInfo` members.
    case discovered(PeripheralInfo)
    /// `ble.connected`: `peripheral`, `adapter` (its name; absent from older daemons).
    case connected(peripheral: String, adapter: String? = nil)
    /// `ble.disconnected`: `peripheral`, `reason`, `willReconnect`, `adapter`.
    case disconnected(peripheral: String, reason: String, willReconnect: Bool, adapter: String? = nil)
    /// `ble.notification`: `peripheral`, `service`, `characteristic`,
    /// `instance` (when not 0); the value in the body.
    case notification(CharacteristicPath)
    /// `ble.adapterState`: `adapter`, `state`: an adapter a client chose
    /// changed (powered off, vanished, back).
    case adapterState(adapter: String, state: BluetoothState)
    /// `ble.pairingRequest`: the `PairingPrompt` members.
    case pairingRequest(PairingPrompt)
    /// `ble.pairingCancelled`: `request`, `peripheral`, `reason`.
    case pairingCancelled(request: Int, peripheral: String, reason: String)
    /// `ble.addressChanged`: `peripheral` (the identity address BlueZ now
    /// reports), `previous` (the resolvable private address it had).
    case addressChanged(peripheral: String, previous: String)
    /// `ble.pairingEnded`: a pairing the daemon did for the app without a
    /// waiting `ble.pair` (one cut by the daemon's restart): the
    /// `PairingState` members, and `error` when it failed.
    case pairingEnded(PairingState, error: String?)
    /// `ble.monitor.found`: `monitor`, `peripheral`, `rssi`, `name` (the last two if known).
    case monitorFound(monitor: String, peripheral: String, rssi: Int?, name: String?)
    /// `ble.monitor.lost`: `monitor`, `peripheral`.
    case monitorLost(monitor: String, peripheral: String)
    /// `ble.monitor.advertisements`: `monitor`, `framing`, `lost` (when > 0);
    /// the records in the body (`AdvertisementRecords`).
    case advertisements(monitor: String, lost: Int)

    /// Decodes an event of a Bluetooth kind; nil for any other kind (including
    /// `ble.*` kinds this version does not know). Malformed attributes of a
    /// known kind throw `invalidArgument`.
    public init?(kind: String, attributes: [String: JSONValue]) throws(ProtocolError) {
        switch kind {
        case BluetoothEventKind.state:
            let raw = try Self.string("state", in: attributes, of: kind)
            // A state a newer daemon adds reads as `unknown`, not as an error.
            self = .state(BluetoothState(rawValue: raw) ?? .unknown)
        case BluetoothEventKind.discovered:
            self = .discovered(try PeripheralInfo(attributes: attributes))
        case BluetoothEventKind.connected:
            self = .connected(
                peripheral: try Self.string("peripheral", in: attributes, of: kind), adapter: attributes["adapter"]?.stringValue)
        case BluetoothEventKind.disconnected:
            self = .disconnected(
                peripheral: try Self.string("peripheral", in: attributes, of: kind),
                reason: attributes["reason"]?.stringValue ?? "",
                willReconnect: attributes["willReconnect"] == .bool(true), adapter: attributes["adapter"]?.stringValue)
        case BluetoothEventKind.notification:
            var instance = 0
            if let given = attributes["instance"] {
                guard case let .number(number) = given, number >= 0, number < 65536, number == number.rounded() else {
                    throw ProtocolError(.invalidArgument, "\(kind): attribute 'instance' is not a characteristic instance")
                }
                instance = Int(number)
            }
            self = .notification(
                CharacteristicPath(
                    peripheral: try Self.string("peripheral", in: attributes, of: kind),
                    service: try Self.string("service", in: attributes, of: kind),
                    characteristic: try Self.string("characteristic", in: attributes, of: kind), instance: instance))
        case BluetoothEventKind.adapterState:
            let raw = try Self.string("state", in: attributes, of: kind)
            self = .adapterState(adapter: try Self.string("adapter", in: attributes, of: kind), state: BluetoothState(rawValue: raw) ?? .unknown)
        case BluetoothEventKind.pairingRequest:
            do {
                let data = try JSONEncoder().encode(JSONValue.object(attributes))
                self = .pairingRequest(try JSONDecoder().decode(PairingPrompt.self, from: data))
            } catch {
                throw ProtocolError(.invalidArgument, "\(kind): \(error)")
            }
        case BluetoothEventKind.pairingCancelled:
            guard case let .number(request)? = attributes["request"] else {
                throw ProtocolError(.invalidArgument, "\(kind): attribute 'request' is missing or not a number")
            }
            self = .pairingCancelled(
                request: Int(request), peripheral: try Self.string("peripheral", in: attributes, of: kind),
                reason: attributes["reason"]?.stringValue ?? "")
        case BluetoothEventKind.addressChanged:
            self = .addressChanged(
                peripheral: try Self.string("peripheral", in: attributes, of: kind),
                previous: try Self.string("previous", in: attributes, of: kind))
        case BluetoothEventKind.pairingEnded:
            func flag(_ key: String) -> Bool { if case let .bool(value)? = attributes[key] { value } else { false } }
            self = .pairingEnded(
                PairingState(
                    peripheral: try Self.string("peripheral", in: attributes, of: kind), paired: flag("paired"),
                    bonded: flag("bonded"), trusted: flag("trusted")),
                error: attributes["error"]?.stringValue)
        case MonitorEventKind.found:
            let rssi: Int? = if case let .number(value)? = attributes["rssi"], value.isFinite, abs(value) < 1000 { Int(value) } else { nil }
            self = .monitorFound(
                monitor: try Self.string("monitor", in: attributes, of: kind),
                peripheral: try Self.string("peripheral", in: attributes, of: kind), rssi: rssi, name: attributes["name"]?.stringValue)
        case MonitorEventKind.lost:
            self = .monitorLost(
                monitor: try Self.string("monitor", in: attributes, of: kind),
                peripheral: try Self.string("peripheral", in: attributes, of: kind))
        case MonitorEventKind.advertisements:
            let lost: Int = if case let .number(value)? = attributes["lost"], value.isFinite, value >= 0, value < 1e15 { Int(value) } else { 0 }
            self = .advertisements(monitor: try Self.string("monitor", in: attributes, of: kind), lost: lost)
        default:
            return nil
        }
    }

    /// Whether `kind` is one of the Bluetooth event kinds (known to this version or not).
    public static func isBluetoothKind(_ kind: String) -> Bool {
        kind.hasPrefix("ble.")
    }

    /// The event kind, one of `BluetoothEventKind`.
    public var kind: String {
        switch self {
        case .state: BluetoothEventKind.state
        case .discovered: BluetoothEventKind.discovered
        case .connected: BluetoothEventKind.connected
        case .disconnected: BluetoothEventKind.disconnected
        case .notification: BluetoothEventKind.notification
        case .adapterState: BluetoothEventKind.adapterState
        case .pairingRequest: BluetoothEventKind.pairingRequest
        case .pairingCancelled: BluetoothEventKind.pairingCancelled
        case .addressChanged: BluetoothEventKind.addressChanged
        case .pairingEnded: BluetoothEventKind.pairingEnded
        case .monitorFound: MonitorEventKind.found
        case .monitorLost: MonitorEventKind.lost
        case .advertisements: MonitorEventKind.advertisements
        }
    }

    /// The attributes as they go on the wire.
    public var attributes: [String: JSONValue] {
        switch self {
        case let .state(state):
            ["state": .string(state.rawValue)]
        case let .discovered(peripheral):
            peripheral.attributes
        case let .connected(peripheral, adapter):
            Self.adding(adapter, to: ["peripheral": .string(peripheral)])
        case let .disconnected(peripheral, reason, willReconnect, adapter):
            Self.adding(adapter, to: ["peripheral": .string(peripheral), "reason": .string(reason), "willReconnect": .bool(willReconnect)])
        case let .notification(path):
            path.instance == 0
                ? ["peripheral": .string(path.peripheral), "service": .string(path.service), "characteristic": .string(path.characteristic)]
                : ["peripheral": .string(path.peripheral), "service": .string(path.service), "characteristic": .string(path.characteristic),
                   "instance": .number(Double(path.instance))]
        case let .adapterState(adapter, state):
            ["adapter": .string(adapter), "state": .string(state.rawValue)]
        case let .pairingRequest(prompt):
            prompt.attributes
        case let .pairingCancelled(request, peripheral, reason):
            ["request": .number(Double(request)), "peripheral": .string(peripheral), "reason": .string(reason)]
        case let .addressChanged(peripheral, previous):
            ["peripheral": .string(peripheral), "previous": .string(previous)]
        case let .pairingEnded(state, error):
            ["peripheral": .string(state.peripheral), "paired": .bool(state.paired), "bonded": .bool(state.bonded),
             "trusted": .bool(state.trusted)].merging(error.map { ["error": JSONValue.string($0)] } ?? [:]) { a, _ in a }
        case let .monitorFound(monitor, peripheral, rssi, name):
            ["monitor": .string(monitor), "peripheral": .string(peripheral)]
                .merging(rssi.map { ["rssi": JSONValue.number(Double($0))] } ?? [:]) { a, _ in a }
                .merging(name.map { ["name": JSONValue.string($0)] } ?? [:]) { a, _ in a }
        case let .monitorLost(monitor, peripheral):
            ["monitor": .string(monitor), "peripheral": .string(peripheral)]
        case let .advertisements(monitor, lost):
            ["monitor": .string(monitor), "framing": .string(AdvertisementRecords.framing)]
                .merging(lost > 0 ? ["lost": JSONValue.number(Double(lost))] : [:]) { a, _ in a }
        }
    }

    /// The peripheral the event is about; nil for `state`.
    public var peripheral: String? {
        switch self {
        case .state, .adapterState: nil
        case let .discovered(info): info.address
        case let .connected(peripheral, _), let .disconnected(peripheral, _, _, _): peripheral
        case let .notification(path): path.peripheral
        case let .pairingRequest(prompt): prompt.peripheral
        case let .pairingCancelled(_, peripheral, _): peripheral
        case let .addressChanged(peripheral, _): peripheral
        case let .pairingEnded(state, _): state.peripheral
        case let .monitorFound(_, peripheral, _, _), let .monitorLost(_, peripheral): peripheral
        case .advertisements: nil
        }
    }

    private static func adding(_ adapter: String?, to attributes: [String: JSONValue]) -> [String: JSONValue] {
        guard let adapter else { return attributes }
        var attributes = attributes
        attributes["adapter"] = .string(adapter)
        return attributes
    }

    private static func string(_ key: String, in attributes: [String: JSONValue], of kind: String) throws(ProtocolError) -> String {
        guard let value = attributes[key]?.stringValue else {
            throw ProtocolError(.invalidArgument, "\(kind): attribute '\(key)' is missing or not a string")
        }
        return value
    }
}

extension PeripheralInfo {
    /// The peripheral's members as event attributes (`ble.discovered`): the same keys as its JSON.
    public var attributes: [String: JSONValue] {
        guard let data = try? JSONEncoder().encode(self),
              case let .object(object)? = try? JSONDecoder().decode(JSONValue.self, from: data) else { return [:] }
        return object
    }

    /// Reads a peripheral back from event attributes. Only `address` is
    /// required: the collections default to empty, `addressType` to `public`
    /// and `state` to `disconnected`; other keys are ignored.
    public init(attributes: [String: JSONValue]) throws(ProtocolError) {
        let defaults: [String: JSONValue] = [
            "addressType": "public", "state": "disconnected", "serviceUUIDs": .array([]),
            "manufacturerData": .object([:]), "serviceData": .object([:]),
        ]
        let complete = attributes.merging(defaults) { given, _ in given }
        do {
            let data = try JSONEncoder().encode(JSONValue.object(complete))
            self = try JSONDecoder().decode(PeripheralInfo.self, from: data)
        } catch let DecodingError.keyNotFound(key, _) {
            throw ProtocolError(.invalidArgument, "peripheral attributes: missing '\(key.stringValue)'")
        } catch {
            throw ProtocolError(.invalidArgument, "peripheral attributes: \(error)")
        }
    }
}

extension PairingPrompt {
    /// The prompt's members as event attributes (`ble.pairingRequest`).
    public var attributes: [String: JSONValue] {
        guard let data = try? JSONEncoder().encode(self),
              case let .object(object)? = try? JSONDecoder().decode(JSONValue.self, from: data) else { return [:] }
        return object
    }
}
