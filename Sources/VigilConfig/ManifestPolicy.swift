import VigilLifecycle
import Glibc
import VigilProtocol

/// What the daemon accepts from a manifest before any app runs from it
/// (docs/security.md): who may have written it, and which users it may name.
///
/// A manifest says what program to run and as whom, so whoever can change
/// one, or the folder it is in, or any folder above, can run code as the
/// app's user. Every file and folder on the way must therefore be owned by a
/// trusted owner (root, or the daemon's own user) and not writable by anyone
/// else. An app runs as root only when its manifest says `user = "root"` (or
/// names the root group) and only root can change the manifest.
public struct ManifestPolicy: Sendable, Equatable {
    /// The system daemon (`vigild --system`): every manifest names its user.
    public var systemMode: Bool
    /// Users who may own manifests and the folders above them: root and the daemon's user.
    public var trustedOwners: Set<UInt32>
    /// Groups whose write permission is harmless: a user private group
    /// (named as its user, no other member) of a trusted owner, as a desktop
    /// user's umask 002 makes files. Empty for the system daemon.
    public var harmlessGroups: Set<UInt32>
    /// The daemon's user, as a per-user daemon compares `user` with it.
    public var daemonUID: UInt32
    public var daemonUserName: String?

    public init(
        systemMode: Bool, trustedOwners: Set<UInt32>, harmlessGroups: Set<UInt32> = [], daemonUID: UInt32,
        daemonUserName: String?
    ) {
        self.systemMode = systemMode
        self.trustedOwners = trustedOwners
        self.harmlessGroups = harmlessGroups
        self.daemonUID = daemonUID
        self.daemonUserName = daemonUserName
    }

    /// A per-user daemon of the calling process's user.
    public static var perUser: ManifestPolicy {
        ManifestPolicy(systemMode: false, trustedOwners: [0, geteuid()], daemonUID: geteuid(), daemonUserName: nil)
    }

    /// The checks of a manifest's own fields that need no account database.
    func validate(_ manifest: AppManifest) throws(ManifestProblem) {
        func problem(_ field: String, _ message: String) -> ManifestProblem {
            ManifestProblem(file: manifest.path, field: field, message: message)
        }
        if systemMode, manifest.user == nil {
            throw problem(
                "user",
                "is required by the system daemon, which runs every app as the user its manifest names: add user = \"NAME\" (an unprivileged account for this app)")
        }
        if !systemMode, let user = manifest.user {
            let isDaemonUser = switch user {
            case let .id(id): id == daemonUID
            case let .name(name): name == daemonUserName
            }
            if !isDaemonUser {
                throw problem(
                    "user",
                    "is \(user), but a per-user daemon runs every app as its own user (\(daemonUserName.map { "'\($0)'" } ?? "uid \(daemonUID)")): leave it out, or run the system daemon (vigild --system) to run apps as other users")
            }
        }
        let rootNamed: [(String, AccountReference)] =
            [("user", manifest.user), ("group", manifest.group)].compactMap { field, account in account.map { (field, $0) } }
            + manifest.supplementaryGroups.enumerated().map { ("supplementary-groups[\($0.offset)]", $0.element) }
        if let (field, _) = rootNamed.first(where: { $0.1.isLiterallyRoot }), !manifest.rootOwned, systemMode {
            throw problem(
                field,
                "names root, which needs a manifest only root can change: \(manifest.path) and every folder above it must be owned by root and not writable by group or others")
        }
    }
}

/// Ownership and modes of manifest files and the folders above them.
enum ManifestPathCheck {
    /// Whether `path` (a folder or file's status) may feed the daemon; the
    /// reason when not. `isAncestor`: a folder above a manifest folder, where
    /// a root-owned sticky folder (`/tmp`) is safe: there nobody but an
    /// entry's owner can rename or remove it.
    static func problem(_ info: stat, path: String, isAncestor: Bool, policy: ManifestPolicy) -> String? {
        let mode = info.st_mode & 0o7777
        let shownMode = "mode " + String(mode, radix: 8).leftPadded(to: 4)
        if !policy.trustedOwners.contains(info.st_uid) {
            return "\(path) is owned by uid \(info.st_uid), who is neither root nor the daemon's user"
        }
        let stickyRoot = isAncestor && info.st_uid == 0 && mode & 0o1000 != 0
        if mode & 0o002 != 0, !stickyRoot {
            return "\(path) is writable by others (\(shownMode))"
        }
        if mode & 0o020 != 0, !stickyRoot, !policy.harmlessGroups.contains(info.st_gid) {
            return "\(path) is writable by its group, gid \(info.st_gid) (\(shownMode))"
        }
        return nil
    }

    /// Whether only root can change it.
    static func isRootOnly(_ info: stat, isAncestor: Bool) -> Bool {
        guard info.st_uid == 0 else { return false }
        let mode = info.st_mode & 0o7777
        if isAncestor, mode & 0o1000 != 0 { return true }
        return mode & 0o022 == 0
    }

    /// Checks a manifest folder and every folder above it (symbolic links
    /// resolved first). Returns whether only root can change any of them, or
    /// the first problem.
    static func checkFolder(_ directory: String, policy: ManifestPolicy) -> Result<Bool, ManifestProblem> {
        func refused(_ reason: String) -> Result<Bool, ManifestProblem> {
            .failure(ManifestProblem(
                file: directory, field: nil,
                message: "manifest folder refused, its manifests not read: \(reason); a manifest folder and every folder above it must be owned by root or the daemon's user and writable by them only"))
        }
        guard let resolved = realpath(directory, nil) else {
            return refused("cannot resolve it: \(String(cString: strerror(errno)))")
        }
        let real = String(cString: resolved)
        free(resolved)
        var rootOnly = true
        var prefix = ""
        let parts = real.split(separator: "/").map(String.init)
        for index in -1..<parts.count {
            let path = index < 0 ? "/" : prefix + "/" + parts[index]
            if index >= 0 { prefix = path }
            var info = stat()
            guard lstat(path, &info) == 0 else { return refused("cannot stat \(path): \(String(cString: strerror(errno)))") }
            let isAncestor = index < parts.count - 1
            if let problem = problem(info, path: path, isAncestor: isAncestor, policy: policy) { return refused(problem) }
            rootOnly = rootOnly && isRootOnly(info, isAncestor: isAncestor)
        }
        return .success(rootOnly)
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
