import VigilKit

/// `--mqtt TOPIC`: each measurement line, as written to the output, is also
/// published to TOPIC through vigild (`Application.publish`). The call
/// returns once vigild has stored the message durably, so it is awaited
/// before the event that carried the measurement is acknowledged: a bridge
/// frozen or killed right after loses nothing, and a gateway without its
/// broker keeps the lines until it is back. A refused publish (no broker
/// configured, the outbox full) becomes an error line; the measurement line
/// itself is already in the output.
final class MeasurementExport: Sendable {
    let topic: String
    private let app: Application
    private let output: Output

    init(app: Application, topic: String, output: Output) {
        self.app = app
        self.topic = topic
        self.output = output
    }

    func send(_ line: OutputLine) async {
        guard case .measurement = line.record else { return }
        do {
            try await app.publish(Array(line.json().utf8), toTopic: topic)
        } catch {
            say("cannot publish to \(topic): \(error)")
            output.write(OutputLine(.error(operation: "publish to \(topic)", message: "\(error)", address: nil, raw: nil)))
        }
    }
}
