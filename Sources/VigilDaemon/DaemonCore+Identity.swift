import Glibc
import VigilAccessories
import VigilConfig
import VigilLifecycle
import VigilProtocol
import VigilSystem

/// Who apps run as, who may use the control role, and who may read which
/// session log (docs/security.md).
///
/// The system daemon (`vigild --system`) runs every app as the user its
/// manifest names, never as root unless the manifest says `user = "root"`
/// and only root can change it. A per-user daemon runs every app as its own
/// user. The control role is open to root and the daemon's user, and with
/// the system daemon to members of `control-group`; members of
/// `monitor-group` may use its read-only requests.
extension DaemonCore {
    /// What the manifest loader accepts in this daemon's mode.
    static func manifestPolicy(for config: DaemonConfig) -> ManifestPolicy {
        let uid = geteuid()
        let me = try? UserAccount.withID(uid)
        var harmless: Set<UInt32> = []
        // A per-user daemon's desktop user may have umask 002 (Debian's user
        // private groups): a group of the user's own name with no other
        // member gives nobody else write access.
        if !config.systemMode, let me, let group = try? GroupAccount.withID(me.gid), group.name == me.name,
           group.members.allSatisfy({ $0 == me.name }) {
            harmless.insert(group.gid)
        }
        return ManifestPolicy(
            systemMode: config.systemMode, trustedOwners: [0, uid], harmlessGroups: harmless, daemonUID: uid,
            daemonUserName: me?.name)
    }

    /// Says at start whom apps run as and who may control the daemon.
    func logSecurityMode() {
        guard config.systemMode else {
            if geteuid() == 0 {
                logger.notice("per-user mode as root: apps run as root, and only root-owned manifests are read; vigild --system runs each app as the user its manifest names")
            }
            return
        }
        let groups = [("control-group", config.controlGroup), ("monitor-group", config.monitorGroup)].map { key, reference in
            "\(key) \(reference.map { self.resolveGroup($0).shown } ?? "none")"
        }
        logger.notice("system mode: apps run as their manifests' users; control role: root, \(groups.joined(separator: ", "))")
        var info = stat()
        if stat(config.stateDirectory, &info) == 0, info.st_mode & 0o001 == 0 {
            logger.warning("\(config.stateDirectory) (mode \(String(info.st_mode & 0o7777, radix: 8))) cannot be entered by other users: apps that run as them cannot read their session logs under it (make it 0711 or 0755)")
        }
    }

    // MARK: The control role

    /// What a control client may do.
    enum ControlAccess {
        /// Everything.
        case full
        /// Only `readOnlyControlRequests`; the reason names the groups.
        case readOnly(String)
    }

    /// Requests that change nothing and reveal no app's data: what
    /// `monitor-group` may use.
    static let readOnlyControlRequests: Set<String> = [
        StatusRequest.type, ListApps.type, LogRequest.type, ListAccessories.type, WatchAccessories.type,
        GetBluetoothState.type, ListPeripherals.type,
    ]

    /// Who may take the control role: root and the daemon's own user always;
    /// with the system daemon, members of `control-group` (everything) and
    /// of `monitor-group` (read-only requests). Group membership is the
    /// peer's own, as the kernel saw it at connect time (SO_PEERCRED,
    /// SO_PEERGROUPS), not the group database's.
    func controlAccess(for peer: PeerCredentials) throws(ProtocolError) -> ControlAccess {
        if peer.uid == 0 || peer.uid == geteuid() { return .full }
        guard config.systemMode else {
            throw ProtocolError(.unauthorized, "uid \(peer.uid) may not control this daemon (only root and uid \(geteuid()))")
        }
        let control = config.controlGroup.map(resolveGroup)
        if let control, let gid = control.gid, peer.isMember(of: gid) { return .full }
        let monitor = config.monitorGroup.map(resolveGroup)
        if let monitor, let gid = monitor.gid, peer.isMember(of: gid) {
            return .readOnly(
                "uid \(peer.uid) is in the monitor group \(monitor.shown) only, which may use read-only requests (\(Self.readOnlyControlRequests.sorted().joined(separator: ", "))); the others need root or the control group \(control?.shown ?? "(none configured)")")
        }
        var allowed = ["root"]
        if let control { allowed.append("members of the control group \(control.shown)") }
        if let monitor { allowed.append("read-only: members of the monitor group \(monitor.shown)") }
        throw ProtocolError(
            .unauthorized, "uid \(peer.uid) may not use the control role of this daemon; it is open to \(allowed.joined(separator: ", "))")
    }

    /// A configured group: its gid (nil when it does not exist) and how messages show it.
    func resolveGroup(_ reference: AccountReference) -> (gid: gid_t?, shown: String) {
        let found: GroupAccount?
        switch reference {
        case let .name(name): found = try? GroupAccount.named(name)
        case let .id(id): found = try? GroupAccount.withID(id)
        }
        if let found { return (found.gid, "'\(found.name)' (gid \(found.gid))") }
        if case let .id(id) = reference { return (id, "gid \(id)") }
        return (nil, "\(reference) (no such group on this system)")
    }
}
