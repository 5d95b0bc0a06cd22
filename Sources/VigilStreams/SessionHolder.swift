/// Who holds a stream session (an accessory's, an L2CAP channel's, any byte
/// transport's).
public enum SessionHolder: Sendable, Hashable, Codable, CustomStringConvertible {
    case app(String)
    /// A person's terminal (`vigilctl accessory open`, `vigilctl ble l2cap open`), by control connection.
    case control(Int)

    public var description: String {
        switch self {
        case let .app(id): "app \(id)"
        case let .control(connection): "vigilctl (connection \(connection))"
        }
    }
}
