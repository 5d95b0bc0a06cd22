/// MQTT topic names and filters (MQTT 3.1.1, section 4.7): checked before
/// they reach the broker, and matched locally to route a message to the apps
/// whose filters it matches (one subscription serves them all). Here, below
/// both the manifest checks and the broker client, so the rules are written
/// once. A problem is a clause about the text ("is empty", "has '+' ..."),
/// for the caller to put after what the text is.
public enum MQTTTopic {
    /// Why `filter` is not a valid subscription filter; nil when it is.
    public static func problem(filter: String) -> String? {
        if let problem = basicProblem(filter) { return problem }
        let levels = filter.split(separator: "/", omittingEmptySubsequences: false)
        for (index, level) in levels.enumerated() {
            if level.contains("#"), level != "#" || index != levels.count - 1 {
                return "has '#' where it is not a whole level and the last one"
            }
            if level.contains("+"), level != "+" { return "has '+' that is not a whole level" }
        }
        return nil
    }

    /// Why `topic` is not a valid topic to publish to; nil when it is.
    public static func problem(topic: String) -> String? {
        if let problem = basicProblem(topic) { return problem }
        if topic.contains("#") || topic.contains("+") { return "has a wildcard ('#' or '+'), which a topic to publish to cannot have" }
        return nil
    }

    private static func basicProblem(_ text: String) -> String? {
        if text.isEmpty { return "is empty" }
        if text.utf8.count > 65_535 { return "is longer than 65535 bytes" }
        if text.utf8.contains(0) { return "contains a NUL character" }
        return nil
    }

    /// Whether `topic` matches `filter` (`+` one level, `#` this level and
    /// all below; topics starting with `$` match no leading wildcard).
    public static func matches(filter: String, topic: String) -> Bool {
        let filterLevels = filter.split(separator: "/", omittingEmptySubsequences: false)
        let topicLevels = topic.split(separator: "/", omittingEmptySubsequences: false)
        if topic.hasPrefix("$"), let first = filterLevels.first, first == "+" || first == "#" { return false }
        for (index, level) in filterLevels.enumerated() {
            if level == "#" { return true }
            guard index < topicLevels.count else { return false }
            if level != "+" && level != topicLevels[index] { return false }
        }
        return filterLevels.count == topicLevels.count
    }
}
