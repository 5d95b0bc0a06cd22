import VigilProtocol

/// A user or group as a manifest or the config names it: by name (`"logger"`)
/// or by number (`1001`, or `"1001"`). Resolved against the account database
/// only when it is used (an app's launch, a client's handshake), so an
/// account created after the file was read is found.
public enum AccountReference: Sendable, Hashable, CustomStringConvertible {
    case name(String)
    case id(UInt32)

    /// The largest id: 2^32-1 is (uid_t)-1, "no change", to the kernel.
    public static let maximumID: UInt32 = 4_294_967_294

    /// Whether this names root (user) or the root group by itself, literally:
    /// `"root"` or `0`. An alias of uid 0 under another name is not an opt-in.
    public var isLiterallyRoot: Bool {
        switch self {
        case let .name(name): name == "root"
        case let .id(id): id == 0
        }
    }

    public var description: String {
        switch self {
        case let .name(name): "'\(name)'"
        case let .id(id): "\(id)"
        }
    }
}
