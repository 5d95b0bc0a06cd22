import Foundation
import Glibc

/// Finds the built `vigild` and `vigil-demo-app` the tests run.
///
/// In order: `VIGIL_BIN_DIR`; the folder the test bundle itself was built into
/// (so `swift test --scratch-path X` uses X's binaries); the repository's
/// `.build/debug`, found from this file's path.
enum Binaries {
    struct Missing: Error, CustomStringConvertible {
        var description: String
    }

    static let required = ["vigild", "vigil-demo-app"]

    static let directory: Result<String, Missing> = locate()

    static func path(_ name: String) throws -> String {
        try directory.get() + "/" + name
    }

    private static func holdsBinaries(_ directory: String) -> Bool {
        required.allSatisfy { access(directory + "/" + $0, X_OK) == 0 }
    }

    private static func locate() -> Result<String, Missing> {
        if let configured = ProcessInfo.processInfo.environment["VIGIL_BIN_DIR"], !configured.isEmpty {
            return holdsBinaries(configured)
                ? .success(configured)
                : .failure(Missing(description: "VIGIL_BIN_DIR=\(configured) does not hold \(required.joined(separator: " and "))"))
        }
        var tried: [String] = []
        // The test bundle's own build folder (Linux: .build/<triple>/debug/VigilPackageTests.xctest).
        if let executable = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
            var folder = (executable as NSString).deletingLastPathComponent
            for _ in 0..<4 where folder.count > 1 {
                tried.append(folder)
                if holdsBinaries(folder) { return .success(folder) }
                folder = (folder as NSString).deletingLastPathComponent
            }
        }
        // <root>/Tests/VigilIntegrationTests/Support/Binaries.swift -> <root>
        var root = URL(fileURLWithPath: #filePath)
        for _ in 0..<4 { root.deleteLastPathComponent() }
        for candidate in [".build/debug", ".build/release"] {
            let folder = root.path + "/" + candidate
            tried.append(folder)
            if holdsBinaries(folder) { return .success(folder) }
        }
        return .failure(Missing(description: "cannot find \(required.joined(separator: ", ")) (run `swift build` first, or set VIGIL_BIN_DIR); looked in \(tried.joined(separator: ", "))"))
    }
}
