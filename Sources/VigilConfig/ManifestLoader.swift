import VigilLifecycle
import FoundationEssentials
import Glibc
import VigilProtocol

/// Reads every `*.toml` manifest from a list of directories.
///
/// A bad manifest is reported and skipped; the others load, so one typo never
/// takes the daemon or the other apps down. Later directories override earlier
/// ones (a per-user manifest replaces a system one with the same id).
public enum ManifestLoader {
    public struct Result: Sendable {
        public var manifests: [String: AppManifest]
        public var problems: [ManifestProblem]
    }

    /// Reads every manifest of `directories`, refusing folders and files that
    /// `policy` says could have been written by someone untrusted, and
    /// manifests whose users it does not allow (see `ManifestPolicy`).
    public static func load(directories: [String], policy: ManifestPolicy = .perUser) -> Result {
        var manifests: [String: AppManifest] = [:]
        var problems: [ManifestProblem] = []
        for directory in directories {
            var seenHere: [String: String] = [:]
            let names: [String]
            do {
                names = try FileManager.default.contentsOfDirectory(atPath: directory)
            } catch {
                // A missing directory is normal (no per-user apps); others are worth saying.
                if FileManager.default.fileExists(atPath: directory) {
                    problems.append(ManifestProblem(file: directory, field: nil, message: "cannot list directory: \(error)"))
                }
                continue
            }
            let folderRootOnly: Bool
            switch ManifestPathCheck.checkFolder(directory, policy: policy) {
            case let .success(rootOnly): folderRootOnly = rootOnly
            case let .failure(problem):
                if names.contains(where: { $0.hasSuffix(".toml") }) { problems.append(problem) }
                continue
            }
            for name in names.sorted() where name.hasSuffix(".toml") {
                let file = directory + "/" + name
                do {
                    let (bytes, status) = try ConfigFile.contents(file)
                    if let reason = ManifestPathCheck.problem(status, path: file, isAncestor: false, policy: policy) {
                        throw ManifestProblem(
                            file: file, field: nil,
                            message: "manifest refused, not read: \(reason); a manifest must be owned by root or the daemon's user and writable by them only")
                    }
                    var manifest = try AppManifest.parse(bytes, file: file)
                    manifest.rootOwned = folderRootOnly && ManifestPathCheck.isRootOnly(status, isAncestor: false)
                    try policy.validate(manifest)
                    if let other = seenHere[manifest.id] {
                        throw ManifestProblem(file: file, field: "id", message: "'\(manifest.id)' is already declared by \(other)")
                    }
                    seenHere[manifest.id] = file
                    manifests[manifest.id] = manifest
                } catch let problem as ManifestProblem {
                    problems.append(problem)
                } catch {
                    problems.append(ManifestProblem(file: file, field: nil, message: "\(error)"))
                }
            }
        }
        return Result(manifests: manifests, problems: problems)
    }
}
