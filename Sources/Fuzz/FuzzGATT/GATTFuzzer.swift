import Foundation
import VigilProtocol

/// A GATT service definition as an app sends it (`ble.addService`'s `service`,
/// JSON), through the daemon's check before BlueZ sees it.
///
/// Beyond "does not crash": a definition the check accepts comes out in the
/// one form BlueZ and the daemon's comparisons rely on (lowercase 128-bit
/// ASCII UUIDs, lowercase ASCII hex values), keeps its characteristics and
/// properties, and checking it again changes nothing; a refused one is an
/// `invalidArgument` with a message.
public enum GATTFuzzer {
    public static func fuzz(_ bytes: [UInt8]) {
        guard let definition = try? JSONDecoder().decode(GATTServiceDefinition.self, from: Data(bytes)) else { return }
        let checked: GATTServiceDefinition
        do {
            checked = try GATTDefinitionCheck.canonical(definition)
        } catch {
            check(error.code == .invalidArgument && !error.message.isEmpty, "refused with \(error.code): '\(error.message)'")
            return
        }
        check(isCanonicalUUID(checked.uuid), "service UUID '\(definition.uuid)' came out as '\(checked.uuid)'")
        check(checked.primary != nil, "primary left unset")
        check(checked.characteristics.count == definition.characteristics.count, "characteristics added or lost")
        for (given, result) in zip(definition.characteristics, checked.characteristics) {
            check(isCanonicalUUID(result.uuid), "characteristic UUID '\(given.uuid)' came out as '\(result.uuid)'")
            check(result.properties == given.properties, "properties changed")
            check((result.value == nil) == (given.value == nil), "value added or lost")
            if let value = result.value {
                check(isCanonicalHex(value), "value '\(given.value ?? "")' came out as '\(value)'")
            }
            check((result.descriptors ?? []).count == (given.descriptors ?? []).count, "descriptors added or lost")
            for descriptor in result.descriptors ?? [] {
                check(isCanonicalUUID(descriptor.uuid), "descriptor UUID came out as '\(descriptor.uuid)'")
                check(isCanonicalHex(descriptor.value), "descriptor value came out as '\(descriptor.value)'")
            }
        }
        let again: GATTServiceDefinition
        do {
            again = try GATTDefinitionCheck.canonical(checked)
        } catch {
            fail("an accepted definition is refused when checked again: \(error)")
        }
        check(again == checked, "checking an accepted definition again changes it: \(checked) became \(again)")
    }

    static let lowerHex = Set("0123456789abcdef".utf8)

    /// "0000180d-0000-1000-8000-00805f9b34fb": 8-4-4-4-12 lowercase ASCII hex digits.
    static func isCanonicalUUID(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        guard bytes.count == 36 else { return false }
        return bytes.indices.allSatisfy { index in
            [8, 13, 18, 23].contains(index) ? bytes[index] == UInt8(ascii: "-") : lowerHex.contains(bytes[index])
        }
    }

    static func isCanonicalHex(_ text: String) -> Bool {
        text.utf8.count % 2 == 0 && text.utf8.allSatisfy(lowerHex.contains)
    }
}

/// A broken invariant is a crash, so libFuzzer keeps the input.
func check(_ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String) {
    if !condition() { fail(message()) }
}

func fail(_ message: String) -> Never {
    fatalError("FuzzGATT: \(message)")
}
