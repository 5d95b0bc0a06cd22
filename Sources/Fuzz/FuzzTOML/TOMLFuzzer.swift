import VigilConfig
import VigilLifecycle
import VigilProtocol
import VigilTOML

/// A file in a manifest directory, or the daemon config: the same bytes read
/// as a TOML document, an app manifest and a daemon config.
///
/// Beyond "does not crash" (item 1 of issue 10: toml++ aborted on `[[[`):
/// - a TOML error has a 1-based position and a message;
/// - a refused manifest or config names its file and says why;
/// - an accepted config has only timings the engine can turn into
///   nanoseconds (finite, not negative, below 2^64 ns: item 2's 1e300 trapped
///   at the first background transition), and positive limits.
public enum TOMLFuzzer {
    static let manifestFile = "/fuzz/apps/org.example.fuzz.toml"
    static let configFile = "/fuzz/vigild.toml"

    public static func fuzz(_ bytes: [UInt8]) {
        do {
            _ = try TOMLDocument.parse(bytes)
        } catch {
            check(error.line >= 1 && error.column >= 1 && !error.message.isEmpty, "TOML error without a place or message: \(error)")
        }
        do {
            let manifest = try AppManifest.parse(bytes, file: manifestFile)
            check(!manifest.id.isEmpty && !(manifest.exec.first ?? "").isEmpty, "accepted manifest without id or program")
        } catch {
            check(error.file == manifestFile && !error.message.isEmpty, "manifest problem names no file or reason: \(error)")
        }

        do {
            let config = try DaemonConfig.parse(bytes, file: configFile, defaults: defaults)
            var durations = config.timings.asDictionary.filter { $0.key != "relaunch-limit" }
            durations["bluetooth-request-timeout"] = config.bluetoothRequestTimeout
            for (key, seconds) in durations {
                check(seconds.isFinite && seconds >= 0 && seconds * 1_000_000_000 < 18_446_744_073_709_551_615.0,
                      "config accepted \(key) = \(seconds), which no duration in nanoseconds holds")
            }
            check(config.eventQueueLimit > 0 && config.decisionLogSize > 0 && config.sessionBufferLimit > 0,
                  "config accepted a limit below 1")
        } catch {
            check(error.file == configFile && !error.message.isEmpty, "config problem names no file or reason: \(error)")
        }
    }

    static let defaults = DaemonConfig(system: false, environment: ["HOME": "/fuzz/home", "XDG_RUNTIME_DIR": "/fuzz/run"])
}

/// A broken invariant is a crash, so libFuzzer keeps the input.
func check(_ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String) {
    if !condition() { fail(message()) }
}

func fail(_ message: String) -> Never {
    fatalError("FuzzTOML: \(message)")
}
