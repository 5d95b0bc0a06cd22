/// MQTT topic filter rules (MQTT 3.1.1, 4.7) for `mqtt-topics` in manifests;
/// the same rules as VigilMQTT's `MQTTTopic`, which this layer cannot import
/// (it sits below the C client).
enum MQTTFilterCheck {
    static func problem(_ filter: String) -> String? {
        if filter.isEmpty { return "it is empty" }
        if filter.utf8.count > 65_535 { return "it is longer than 65535 bytes" }
        if filter.utf8.contains(0) { return "it contains a NUL character" }
        let levels = filter.split(separator: "/", omittingEmptySubsequences: false)
        for (index, level) in levels.enumerated() {
            if level.contains("#"), level != "#" || index != levels.count - 1 {
                return "'#' must be a whole level and the last one"
            }
            if level.contains("+"), level != "+" { return "'+' must be a whole level" }
        }
        return nil
    }
}
