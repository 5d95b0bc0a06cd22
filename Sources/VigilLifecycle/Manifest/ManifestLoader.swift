import Foundation
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

    public static func load(directories: [String]) -> Result {
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
                    problems.append(ManifestProblem(file: directory, field: nil, message: "cannot list directory: \(error.localizedDescription)"))
                }
                continue
            }
            for name in names.sorted() where name.hasSuffix(".toml") {
                let file = directory + "/" + name
                do {
                    let manifest = try AppManifest.parse(try ConfigFile.bytes(file), file: file)
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
