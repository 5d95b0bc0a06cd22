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
    /// Whom an app runs as: the credentials to drop to (nil: the daemon's own)
    /// and the environment that says so.
    struct AppIdentity {
        var credentials: SpawnCredentials?
        var environment: [String: String]
        /// For messages: `user 'logger' (uid 999), group 999`.
        var summary: String
    }

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

    // MARK: Apps' users

    /// Resolves the manifest's `user`, `group` and `supplementary-groups`
    /// against the account database, now (at launch). The refusal names the
    /// manifest and the field.
    func identity(of manifest: AppManifest) throws(DaemonError) -> AppIdentity {
        func refused(_ field: String, _ message: String) -> DaemonError {
            DaemonError("\(manifest.path): field '\(field)': \(message)")
        }
        func user(_ reference: AccountReference) throws(DaemonError) -> UserAccount {
            let found: UserAccount?
            do {
                switch reference {
                case let .name(name): found = try UserAccount.named(name)
                case let .id(id): found = try UserAccount.withID(id)
                }
            } catch {
                throw refused("user", "cannot look up \(reference): \(error)")
            }
            guard let found else { throw refused("user", "no user \(reference) on this system") }
            return found
        }
        func group(_ reference: AccountReference, _ field: String) throws(DaemonError) -> GroupAccount {
            let found: GroupAccount?
            do {
                switch reference {
                case let .name(name): found = try GroupAccount.named(name)
                case let .id(id): found = try GroupAccount.withID(id)
                }
            } catch {
                throw refused(field, "cannot look up group \(reference): \(error)")
            }
            guard let found else { throw refused(field, "no group \(reference) on this system") }
            return found
        }

        guard config.systemMode, !manifest.isBuiltIn else {
            // Per-user: the app runs as the daemon does; the manifest may only say so.
            let uid = geteuid(), gid = getegid()
            if let reference = manifest.user, try user(reference).uid != uid {
                throw refused("user", "is \(reference), but this per-user daemon runs apps as uid \(uid) only (vigild --system runs apps as other users)")
            }
            if let reference = manifest.group, try group(reference, "group").gid != gid {
                throw refused("group", "is \(reference), but this per-user daemon runs apps with its own group, gid \(gid)")
            }
            let mine = Set(ProcessCredentials.supplementaryGroups() + [gid])
            for (index, reference) in manifest.supplementaryGroups.enumerated() {
                let field = "supplementary-groups[\(index)]"
                if !mine.contains(try group(reference, field).gid) {
                    throw refused(field, "is \(reference), a group this per-user daemon is not in")
                }
            }
            return AppIdentity(credentials: nil, environment: [:], summary: "the daemon's user (uid \(uid))")
        }

        guard let userReference = manifest.user else {
            throw refused("user", "is required by the system daemon: add user = \"NAME\" (an unprivileged account for this app)")
        }
        // Root, by any name, only when asked for literally in a manifest only root can change.
        let onlyRoot = "\(manifest.path) and every folder above it must be owned by root and writable by root only"
        let account = try user(userReference)
        if account.uid == 0 {
            guard userReference.isLiterallyRoot else {
                throw refused("user", "\(userReference) is uid 0: an app runs as root only with user = \"root\" written out")
            }
            guard manifest.rootOwned else { throw refused("user", "is root, which needs a manifest only root can change: \(onlyRoot)") }
        }
        let primary = try manifest.group.map { reference throws(DaemonError) in try group(reference, "group").gid } ?? account.gid
        if primary == 0 {
            let literal = manifest.group?.isLiterallyRoot ?? userReference.isLiterallyRoot
            guard literal, manifest.rootOwned else {
                throw refused("group", "is gid 0 (root), which needs group = \"root\" written out in a manifest only root can change: \(onlyRoot)")
            }
        }
        var supplementary: [gid_t] = []
        for (index, reference) in manifest.supplementaryGroups.enumerated() {
            let field = "supplementary-groups[\(index)]"
            let gid = try group(reference, field).gid
            if gid == 0, !(reference.isLiterallyRoot && manifest.rootOwned) {
                throw refused(field, "is gid 0 (root), which needs \"root\" written out in a manifest only root can change: \(onlyRoot)")
            }
            if !supplementary.contains(gid) { supplementary.append(gid) }
        }

        let environment = ["HOME": account.home, "USER": account.name, "LOGNAME": account.name]
        let summary = "user '\(account.name)' (uid \(account.uid)), group \(primary)"
            + (supplementary.isEmpty ? "" : ", groups \(supplementary.map(String.init).joined(separator: ","))")
        return AppIdentity(
            credentials: SpawnCredentials(uid: account.uid, gid: primary, groups: supplementary),
            environment: environment, summary: summary)
    }

    /// The credentials an app runs with (resolved at its launch, else now),
    /// nil when the app runs as the daemon's user.
    func credentials(of app: String) -> SpawnCredentials? {
        if let known = appIdentities[app] { return known.credentials }
        guard let manifest = engine.apps[app]?.manifest, let identity = try? identity(of: manifest) else { return nil }
        appIdentities[app] = identity
        return identity.credentials
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
