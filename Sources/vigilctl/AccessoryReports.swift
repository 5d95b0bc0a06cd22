import FoundationEssentials
import Glibc
import VigilKit

/// `vigilctl accessories`: one line per connected accessory.
struct AccessoryTable {
    let accessories: [AccessoryInfo]

    init(_ accessories: [AccessoryInfo]) { self.accessories = accessories }

    var text: String {
        var table = Table(headers: ["CONN", "NAME", "MANUFACTURER", "MODEL", "SERIAL", "FW", "PROTOCOLS", "NODE"])
        for accessory in accessories {
            table.rows.append([
                String(accessory.connectionID), accessory.name, accessory.manufacturer, accessory.modelNumber,
                accessory.serialNumber, accessory.firmwareRevision, accessory.protocolStrings.joined(separator: ","),
                accessory.deviceNode,
            ].map(dashIfEmpty))
        }
        return table.text
    }
}

/// `vigilctl accessories`: the open sessions, with their traffic and above all
/// their loss, which must never go unseen.
struct SessionTable {
    let sessions: [SessionInfo]

    init(_ sessions: [SessionInfo]) { self.sessions = sessions }

    var text: String {
        var table = Table(headers: [
            "SESSION", "CONN", "PROTOCOL", "HOLDER", "SETTINGS", "IN", "OUT", "BUFFERED", "PAUSED", "OVERRUNS", "PARITY", "FRAME",
        ])
        for session in sessions {
            table.rows.append([
                String(session.session), String(session.connectionID), session.protocol, session.holder,
                dashIfEmpty(session.lineSettings), String(session.bytesIn), String(session.bytesOut),
                String(session.bufferedBytes), session.readingPaused ? "yes" : "no",
                String(session.overruns), String(session.parityErrors), String(session.frameErrors),
            ])
        }
        var text = table.text
        for session in sessions where session.overruns + session.parityErrors + session.frameErrors > 0 {
            text += "\nsession \(session.session): the device reported loss: \(session.overruns) overrun(s), "
                + "\(session.parityErrors) parity and \(session.frameErrors) framing error(s)"
        }
        return text
    }
}

/// `vigilctl accessories watch`: one line per change, for people or (with `--json`) for scripts.
struct AccessoryChangeLine {
    /// `present` (there when the watch began), `connected` or `disconnected`.
    let change: String
    let accessory: AccessoryInfo

    var text: String {
        let usb = accessory.vendorID.isEmpty ? "" : " \(accessory.vendorID):\(accessory.productID)"
        let serial = accessory.serialNumber.isEmpty ? "" : " serial \(accessory.serialNumber)"
        return "\(formatTime(Date().timeIntervalSince1970))  \(change.padding(to: 12))  \(accessory.connectionID)  "
            + "\(accessory.name) (\(dashIfEmpty(accessory.manufacturer))\(usb)\(serial)) at \(accessory.deviceNode)  "
            + "protocols: \(dashIfEmpty(accessory.protocolStrings.joined(separator: ",")))"
    }

    /// One compact JSON object, the shape of the protocol's `accessoryEvent`.
    func json() throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: try encoder.encode(AccessoryEvent(change: change, accessory: accessory)), as: UTF8.self)
    }
}

func dashIfEmpty(_ text: String) -> String {
    text.isEmpty ? "-" : text
}
