import FoundationEssentials
import Glibc
import VigilProtocol

/// A GATT server described in a file, as `vigilctl ble serve FILE` reads it
/// (JSON; docs/bluetooth.md, "vigilctl ble serve"):
///
/// ```json
/// {
///   "services": [
///     {"uuid": "180d", "characteristics": [
///       {"uuid": "2a37", "properties": ["notify"]},
///       {"uuid": "2a38", "properties": ["read"], "value": "01"},
///       {"uuid": "2a39", "properties": ["write"]}
///     ]}
///   ],
///   "advertisement": {"localName": "Vigil HRM", "serviceUUIDs": ["180d"]},
///   "stdin": "180d/2a37"
/// }
/// ```
///
/// `services` are `GATTServiceDefinition`s and `advertisement` an
/// `AdvertisementData`, with the same keys as on the wire; `stdin` names the
/// characteristic whose value comes from standard input (`SERVICE/CHAR`, or
/// `CHAR` alone when only one service has it). Unknown keys are refused, so a
/// misspelt one is not silently ignored.
public struct PeripheralDescription: Sendable, Equatable, Codable {
    public var services: [GATTServiceDefinition]
    public var advertisement: AdvertisementData?
    public var stdin: String?

    public init(services: [GATTServiceDefinition], advertisement: AdvertisementData? = nil, stdin: String? = nil) {
        self.services = services
        self.advertisement = advertisement
        self.stdin = stdin
    }

    /// A problem with a description, saying where.
    public struct Invalid: Error, Equatable, CustomStringConvertible {
        public var message: String
        public init(_ message: String) { self.message = message }
        public var description: String { message }
    }

    /// The properties BlueZ knows (`org.bluez.GattCharacteristic1.Flags`).
    public static let knownProperties: Set<String> = [
        "broadcast", "read", "write-without-response", "write", "notify", "indicate", "authenticated-signed-writes",
        "extended-properties", "reliable-write", "writable-auxiliaries", "encrypt-read", "encrypt-write",
        "encrypt-notify", "encrypt-indicate", "encrypt-authenticated-read", "encrypt-authenticated-write",
        "encrypt-authenticated-notify", "encrypt-authenticated-indicate", "secure-read", "secure-write",
        "secure-notify", "secure-indicate", "authorize",
    ]

    /// Reads and checks a description from JSON.
    public init(json data: Data) throws(Invalid) {
        let object: [String: JSONValue]
        do {
            guard case let .object(top) = try JSONDecoder().decode(JSONValue.self, from: data) else {
                throw Invalid("the file must hold a JSON object with \"services\"")
            }
            object = top
        } catch let error as Invalid {
            throw error
        } catch {
            throw Invalid("not valid JSON: \(Self.describe(error))")
        }
        let unknown = Set(object.keys).subtracting(["services", "advertisement", "stdin"])
        guard unknown.isEmpty else {
            throw Invalid("unknown key(s) \(unknown.sorted().map { "\"\($0)\"" }.joined(separator: ", ")) (expected services, advertisement, stdin)")
        }
        do {
            self = try JSONDecoder().decode(Self.self, from: data)
        } catch {
            throw Invalid(Self.describe(error))
        }
        try validate()
    }

    /// Checks what the daemon would refuse, with clearer messages, and what
    /// `vigilctl` itself needs: UUIDs, properties, hex values, a `stdin`
    /// characteristic that exists and is dynamic.
    public func validate() throws(Invalid) {
        guard !services.isEmpty else { throw Invalid("\"services\" is empty: nothing to serve") }
        var seen: Set<String> = []
        for service in services {
            guard let uuid = GATTUUID.canonical(service.uuid) else { throw Invalid("service '\(service.uuid)': not a UUID") }
            guard seen.insert(uuid).inserted else { throw Invalid("service \(service.uuid) is defined twice") }
            guard !service.characteristics.isEmpty else { throw Invalid("service \(service.uuid) has no characteristics") }
            var characteristics: Set<String> = []
            for characteristic in service.characteristics {
                let name = "\(service.uuid)/\(characteristic.uuid)"
                guard let uuid = GATTUUID.canonical(characteristic.uuid) else { throw Invalid("characteristic '\(name)': not a UUID") }
                guard characteristics.insert(uuid).inserted else { throw Invalid("characteristic \(name) is defined twice") }
                guard !characteristic.properties.isEmpty else { throw Invalid("characteristic \(name) has no properties") }
                if let unknown = characteristic.properties.first(where: { !Self.knownProperties.contains($0) }) {
                    throw Invalid("characteristic \(name): unknown property '\(unknown)'")
                }
                if let value = characteristic.value {
                    guard GATTHex.bytes(value) != nil else { throw Invalid("characteristic \(name): value '\(value)' is not hex") }
                    if let writable = characteristic.properties.first(where: { !$0.hasSuffix("read") }) {
                        throw Invalid("characteristic \(name) has a fixed value, so it must be read-only (not '\(writable)')")
                    }
                }
                for descriptor in characteristic.descriptors ?? [] {
                    guard GATTUUID.canonical(descriptor.uuid) != nil else { throw Invalid("descriptor '\(descriptor.uuid)' of \(name): not a UUID") }
                    guard GATTHex.bytes(descriptor.value) != nil else {
                        throw Invalid("descriptor \(descriptor.uuid) of \(name): value '\(descriptor.value)' is not hex")
                    }
                }
            }
        }
        if let advertisement {
            for uuid in advertisement.serviceUUIDs ?? [] where GATTUUID.canonical(uuid) == nil {
                throw Invalid("advertisement: service UUID '\(uuid)' is not a UUID")
            }
            for (company, data) in advertisement.manufacturerData ?? [:] {
                guard let id = Int(company), (0...0xffff).contains(id) else {
                    throw Invalid("advertisement: manufacturer '\(company)' is not a company identifier (decimal, 0-65535)")
                }
                guard GATTHex.bytes(data) != nil else { throw Invalid("advertisement: manufacturer data '\(data)' is not hex") }
            }
            for (uuid, data) in advertisement.serviceData ?? [:] {
                guard GATTUUID.canonical(uuid) != nil else { throw Invalid("advertisement: service data UUID '\(uuid)' is not a UUID") }
                guard GATTHex.bytes(data) != nil else { throw Invalid("advertisement: service data '\(data)' is not hex") }
            }
        }
        if let stdin { _ = try characteristic(named: stdin) }
    }

    /// The characteristic `name` designates (`SERVICE/CHAR`, or `CHAR` alone
    /// when only one service has it), as service and characteristic UUIDs in
    /// the definition's spelling. It must be dynamic (no fixed value).
    public func characteristic(named name: String) throws(Invalid) -> (service: String, characteristic: String) {
        let parts = name.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        let matches: [(service: String, characteristic: GATTCharacteristicDefinition)]
        switch parts.count {
        case 1:
            matches = services.flatMap { service in
                service.characteristics.filter { GATTUUID.matches($0.uuid, parts[0]) }.map { (service.uuid, $0) }
            }
            guard matches.count <= 1 else {
                throw Invalid("characteristic \(name) is in several services: say which, as SERVICE/\(name)")
            }
        case 2:
            matches = services.filter { GATTUUID.matches($0.uuid, parts[0]) }.flatMap { service in
                service.characteristics.filter { GATTUUID.matches($0.uuid, parts[1]) }.map { (service.uuid, $0) }
            }
        default:
            throw Invalid("'\(name)' does not name a characteristic (CHAR or SERVICE/CHAR)")
        }
        guard let match = matches.first else { throw Invalid("no characteristic \(name) among the services") }
        guard match.characteristic.value == nil else {
            throw Invalid("characteristic \(name) has a fixed value; stdin needs a dynamic one (no \"value\")")
        }
        let properties = Set(match.characteristic.properties)
        guard !properties.isDisjoint(with: ["read", "notify", "indicate", "encrypt-read", "encrypt-notify", "encrypt-indicate",
                                            "encrypt-authenticated-read", "encrypt-authenticated-notify",
                                            "encrypt-authenticated-indicate", "secure-read", "secure-notify", "secure-indicate"])
        else { throw Invalid("characteristic \(name) can be neither read nor notified, so a value from stdin reaches nobody") }
        return (match.service, match.characteristic.uuid)
    }

    /// The advertisement to use when asked to advertise: the description's,
    /// or else one naming the primary services.
    public var advertisementOrDefault: AdvertisementData {
        advertisement ?? AdvertisementData(serviceUUIDs: services.filter { $0.primary ?? true }.map(\.uuid))
    }

    private static func describe(_ error: any Error) -> String {
        switch error {
        case let DecodingError.keyNotFound(key, context):
            "missing \"\(key.stringValue)\"\(path(context.codingPath))"
        case let DecodingError.typeMismatch(_, context), let DecodingError.valueNotFound(_, context):
            "\(context.debugDescription)\(path(context.codingPath))"
        case let DecodingError.dataCorrupted(context):
            // The description, not the underlying error (FoundationEssentials has no
            // localizedDescription): "The given data was not valid JSON." as before.
            "\(context.debugDescription)\(path(context.codingPath))"
        default:
            "\(error)"
        }
    }

    private static func path(_ codingPath: [any CodingKey]) -> String {
        guard !codingPath.isEmpty else { return "" }
        return " at " + String(codingPath.map { $0.intValue.map { "[\($0)]" } ?? ".\($0.stringValue)" }.joined().trimmingPrefix("."))
    }
}
