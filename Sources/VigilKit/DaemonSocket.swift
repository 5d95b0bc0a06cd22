import FoundationEssentials
import Glibc

/// Where the daemon listens, resolved as docs/protocol.md prescribes so that
/// every client (Swift, Python, vigilctl) finds the same daemon.
public enum DaemonSocket {
    /// The socket of the system daemon (`vigild --system`).
    public static let systemPath = "/run/vigil/vigild.sock"

    /// The socket to use: the explicit path, else `VIGIL_SOCKET` (which vigild
    /// sets for every app it launches), else the per-user daemon's socket when
    /// `XDG_RUNTIME_DIR` is set, else the system daemon's.
    public static func path(
        explicit: String? = nil,
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) -> String {
        if let explicit, !explicit.isEmpty { return explicit }
        if let path = environment["VIGIL_SOCKET"], !path.isEmpty { return path }
        if let runtime = environment["XDG_RUNTIME_DIR"], !runtime.isEmpty {
            return runtime + "/vigil/vigild.sock"
        }
        return systemPath
    }

    /// The sockets to try in order: `path`'s answer, and after the per-user
    /// socket the system daemon's, for a desktop user whose machine runs only
    /// the system daemon (vigilctl tries the next when nothing listens).
    public static func candidates(
        explicit: String? = nil,
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) -> [String] {
        let first = path(explicit: explicit, environment: environment)
        let named = (explicit.map { !$0.isEmpty } ?? false) || !(environment["VIGIL_SOCKET"] ?? "").isEmpty
        return named || first == systemPath ? [first] : [first, systemPath]
    }
}
