import Glibc

/// Who is on the other end of a Unix socket, as the kernel saw at connect time.
public struct PeerCredentials: Hashable, Sendable {
    public var pid: pid_t
    public var uid: uid_t
    public var gid: gid_t

    public init(pid: pid_t, uid: uid_t, gid: gid_t) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
    }
}
