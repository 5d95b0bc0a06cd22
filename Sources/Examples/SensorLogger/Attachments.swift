import VigilKit

/// The sessions the logger holds: one per accessory that speaks its protocol,
/// opened with `reopen` so that it survives unplugging, and opened again
/// when an accessory connects with none.
actor Attachments {
    private let app: Application
    private let configuration: LoggerConfiguration
    private let ingest: Ingest
    /// Accessories (by `identity`) with a session, open, waiting to reopen or being opened.
    private var held: Set<String> = []

    init(app: Application, configuration: LoggerConfiguration, ingest: Ingest) {
        self.app = app
        self.configuration = configuration
        self.ingest = ingest
    }

    /// Opens a session with every connected accessory that speaks the protocol and has none.
    func rescan(_ why: String) async {
        do {
            for accessory in try await app.accessoryManager.connectedAccessories() {
                await attach(accessory, why)
            }
        } catch {
            say("cannot list accessories (\(why)): \(error)")
        }
    }

    /// Opens a session with `accessory` unless it has one or does not speak the protocol.
    func attach(_ accessory: AccessoryInfo, _ why: String) async {
        let protocolString = configuration.protocolString
        guard accessory.protocolStrings.contains(protocolString) else { return }
        let identity = Self.identity(of: accessory)
        // Claimed before the first await: the actor may take other calls meanwhile.
        guard held.insert(identity).inserted else { return }
        let session: AccessorySession
        do {
            session = try await app.accessoryManager.openSession(
                to: accessory, protocol: protocolString, lineSettings: configuration.lineSettings, reopen: true)
        } catch {
            held.remove(identity)
            if "\(error)".contains("held by app \(app.id) ") {
                // vigild kept the session of an earlier process of this app:
                // its events come through `Application.events` (see `MainEvents`).
                say("\(Self.describe(accessory)): the session of an earlier process carries on (\(error))")
            } else {
                say("cannot open a session with \(Self.describe(accessory)) for \(protocolString): \(error)")
            }
            return
        }
        let serial = Self.serial(of: accessory)
        do {
            try await ingest.store.recordSession(
                session.id, accessorySerial: serial, connectionID: accessory.connectionID, protocol: protocolString)
        } catch {
            say("cannot record session \(session.id): \(error)")
        }
        ingest.stats.update { $0.sessionsOpened += 1 }
        say("session \(session.id) open with \(Self.describe(accessory)) for \(protocolString) (\(why))")
        let (app, ingest) = (app, ingest)
        Task {
            await Self.follow(session, serial: serial, app: app, ingest: ingest)
            await self.released(identity)
        }
    }

    /// The session ended for good. The accessory may still be there (vigild
    /// restarted, or closed the session after an error): look again, a second
    /// later so that a session that keeps failing does not spin, and only then
    /// say the app has finished.
    private func released(_ identity: String) async {
        held.remove(identity)
        try? await Task.sleep(for: .seconds(1))
        await rescan("a session ended")
        await app.finishedProcessing()
    }

    /// Handles the session's items in order; each is acknowledged when the loop
    /// asks for the next one, after it is handled (committed, for data).
    private static func follow(_ session: AccessorySession, serial: String, app: Application, ingest: Ingest) async {
        var stream = StreamState(
            session: session.id, accessorySerial: serial, connectionID: session.accessory.connectionID, isResumed: true)
        for await event in session.incoming {
            switch event {
            case let .data(bytes): await ingest.data(bytes, on: &stream, redelivered: false)
            case let .loss(loss): await ingest.loss(loss, on: stream)
            case let .interrupted(reason): await ingest.interrupted(reason, on: &stream)
            case let .reopened(accessory): await ingest.reopened(accessory, on: &stream)
            case .lines: break  // the logger watches no modem lines
            case let .closed(reason):
                await ingest.closed(reason, on: &stream)
                continue  // the stream ends here; `released` finishes
            }
            // Suspended as soon as this item is acknowledged (when the loop comes round).
            await app.finishedProcessing()
        }
    }

    /// The same accessory across replugs: USB ids and serial number (its place in sysfs without one).
    static func identity(of accessory: AccessoryInfo) -> String {
        "\(accessory.vendorID):\(accessory.productID):\(serial(of: accessory))"
    }

    /// `records.accessorySerial`: the serial number, or where the device is when it has none.
    static func serial(of accessory: AccessoryInfo) -> String {
        if !accessory.serialNumber.isEmpty { return accessory.serialNumber }
        return accessory.sysPath.isEmpty ? accessory.deviceNode : accessory.sysPath
    }

    static func describe(_ accessory: AccessoryInfo) -> String {
        let name = accessory.name.isEmpty ? "accessory" : accessory.name
        return "\(name) \(serial(of: accessory)) on \(accessory.deviceNode) (connection \(accessory.connectionID))"
    }
}
