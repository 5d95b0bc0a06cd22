import Glibc

/// Who is on the other end of a Unix socket, as the kernel saw at connect time.
public struct PeerCredentials: Hashable, Sendable {
    public var pid: pid_t
    public var uid: uid_t
    public var gid: gid_t
    /// The peer's supplementary groups (SO_PEERGROUPS), as of connect time.
    public var groups: [gid_t]

    public init(pid: pid_t, uid: uid_t, gid: gid_t, groups: [gid_t] = []) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
        self.groups = groups
    }

    /// Whether the peer had `gid` as its primary or a supplementary group.
    public func isMember(of gid: gid_t) -> Bool {
        self.gid == gid || groups.contains(gid)
    }
}
