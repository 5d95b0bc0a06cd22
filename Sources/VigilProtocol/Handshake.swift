/// Protocol versions this build speaks. The handshake picks the highest common one.
public enum ProtocolVersion {
    public static let current = 1
    public static let supported: [Int] = [1]
}

/// Who is on the other end of a connection.
public enum PeerRole: String, Codable, Sendable {
    /// A process of an app that vigild launched; identified by its cgroup, not by its word.
    case app
    /// A person's tool (vigilctl) or a test rig: inspects and drives the lifecycle.
    case control
}

/// First frame from a client.
public struct Hello: Message, Equatable {
    public static let type = "hello"
    public var versions: [Int]
    public var role: PeerRole
    /// The app id the client believes it is; checked against the daemon's own mapping.
    public var app: String?
    /// Free text naming the client library, for logs.
    public var client: String?

    public init(versions: [Int] = ProtocolVersion.supported, role: PeerRole, app: String? = nil, client: String? = nil) {
        self.versions = versions
        self.role = role
        self.app = app
        self.client = client
    }
}

/// The daemon's answer to `hello`.
public struct Welcome: Message, Equatable {
    public static let type = "welcome"
    public var version: Int
    public var daemon: String
    public var role: PeerRole
    /// For apps: which app the daemon identified, its state, and why it was launched.
    public var app: String?
    public var state: AppState?
    public var launch: LaunchOptions?
    /// Background-time deadline (CLOCK_MONOTONIC nanoseconds), nil when unlimited.
    public var deadline: UInt64?
    public var limits: FrameLimits
    /// What this daemon handles beyond protocol version 1 as first published
    /// (`Welcome.Feature`): a client uses an addition only when it is named
    /// here, so a newer client works against an older daemon. nil: none.
    public var features: [String]?

    /// Additions to version 1 a daemon names in `features`.
    public enum Feature {
        /// `finishedProcessing` carries `ack` (one message ends a wake).
        public static let finishAcknowledges = "finishedProcessing.ack"
    }

    public init(
        version: Int, daemon: String, role: PeerRole, app: String? = nil, state: AppState? = nil,
        launch: LaunchOptions? = nil, deadline: UInt64? = nil, limits: FrameLimits, features: [String]? = nil
    ) {
        self.version = version
        self.daemon = daemon
        self.role = role
        self.app = app
        self.state = state
        self.launch = launch
        self.deadline = deadline
        self.limits = limits
        self.features = features
    }
}

/// Successful answer to a request that returns nothing in particular.
public struct Done: Message, Equatable {
    public static let type = "reply"
    public init() {}
}
