import Glibc
import VigilConfig
import VigilLifecycle
import VigilSystem

/// Who an app runs as (docs/security.md): the system daemon runs every app as
/// the user its manifest names, never as root unless the manifest says
/// `user = "root"` and only root can change it; a per-user daemon runs every
/// app as its own user.
struct AppIdentity {
    /// The credentials to drop to (nil: the daemon's own).
    var credentials: SpawnCredentials?
    var environment: [String: String]
    /// For messages: `user 'logger' (uid 999), group 999`.
    var summary: String
}

extension AppProcesses {
    // MARK: Apps' users

    /// Resolves the manifest's `user`, `group` and `supplementary-groups`
    /// against the account database, now (at launch). The refusal names the
    /// manifest and the field.
    func identity(of manifest: AppManifest, config: DaemonConfig) throws(DaemonError) -> AppIdentity {
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
    func credentials<S: DaemonServices>(of app: String, services: isolated S) -> SpawnCredentials? {
        if let known = identities[app] { return known.credentials }
        guard let manifest = services.engine.apps[app]?.manifest, let identity = try? identity(of: manifest, config: services.config)
        else { return nil }
        identities[app] = identity
        return identity.credentials
    }
}
