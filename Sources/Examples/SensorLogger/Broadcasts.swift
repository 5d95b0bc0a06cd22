import Foundation
import VigilKit

/// One advertisement of a broadcast sensor, decoded.
struct BroadcastReading: Sendable {
    var address: String
    /// vigild's receive time, ns since 1970.
    var receivedAtNs: UInt64
    var rssi: Int?
    var reading: RuuviReading
}

/// Broadcast sensors (`VIGIL_LOGGER_RUUVI=1`): RuuviTags, which never accept
/// a connection and put each reading in their advertisements. An
/// advertisement monitor on company 0x0499, format 5, hands every
/// advertisement to the logger, batched while it is suspended. Each reading
/// is stored (and published with `--mqtt`) as it is handled, before the
/// manager acknowledges its event, so a crash hands the batch again and
/// the unique index keeps each reading once.
struct Broadcasts {
    let app: Application
    let store: RecordStore
    let mqttTopic: String?

    func run() async {
        let central: CentralManager
        do {
            central = try await CentralManager(application: app, restoreIdentifier: "sensor-logger-broadcasts")
            // A relaunch by the monitor finds it kept by vigild; starting it again replaces it.
            try await central.startMonitor(
                "ruuvi", patterns: [.manufacturer(RuuviReading.company, prefix: [RuuviReading.format])], lostTimeout: 60)
        } catch {
            say("cannot monitor RuuviTags: \(error)")
            return
        }
        say("monitoring RuuviTags (company 0x0499, data format 5)")
        var pending: [BroadcastReading] = []
        for await event in central.events {
            switch event {
            case let .advertisement(_, record):
                guard let data = record.manufacturerData[RuuviReading.company],
                      let reading = RuuviReading(manufacturerData: data) else { continue }
                pending.append(BroadcastReading(address: record.address, receivedAtNs: record.receivedAt, rssi: record.rssi, reading: reading))
            case let .advertisementsLost(_, count):
                say("vigild dropped \(count) RuuviTag advertisement(s): the logger fell behind")
            case let .monitorFound(_, peripheral, rssi, _):
                say("RuuviTag \(peripheral) found" + (rssi.map { " (\($0) dBm)" } ?? ""))
            case let .monitorLost(_, peripheral):
                say("RuuviTag \(peripheral) lost")
            default:
                break
            }
            guard !pending.isEmpty else { continue }
            await flush(&pending)
        }
    }

    private func flush(_ pending: inout [BroadcastReading]) async {
        let rows = pending
        pending.removeAll()
        let task = await app.beginBackgroundTask(name: "broadcasts")
        do {
            let inserted = try await store.commit(broadcasts: rows)
            say("stored \(inserted) RuuviTag reading(s)")
            if let mqttTopic { await export(rows, to: mqttTopic) }
        } catch {
            say("cannot store \(rows.count) RuuviTag reading(s): \(error)")
        }
        await app.endBackgroundTask(task)
        await app.finishedProcessing()
    }

    private func export(_ rows: [BroadcastReading], to topic: String) async {
        struct Message: Encodable {
            struct Reading: Encodable {
                var address: String
                var receivedAt: Double
                var rssi: Int?
                var sequence: Int?
                var temperature: Double?
                var humidity: Double?
                var pressure: Double?
            }
            var broadcasts: [Reading]
        }
        let message = Message(broadcasts: rows.map {
            Message.Reading(
                address: $0.address, receivedAt: Double($0.receivedAtNs) / 1e9, rssi: $0.rssi, sequence: $0.reading.sequence,
                temperature: $0.reading.temperature, humidity: $0.reading.humidity, pressure: $0.reading.pressure)
        })
        do {
            let encoder = JSONEncoder()
            encoder.outputFormatting = .sortedKeys
            _ = try await app.publish(Array(try encoder.encode(message)), toTopic: topic)
        } catch {
            say("cannot publish \(rows.count) RuuviTag reading(s) to \(topic): \(error)")
        }
    }
}
