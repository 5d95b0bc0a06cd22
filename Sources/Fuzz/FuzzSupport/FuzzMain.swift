import Foundation

#if FUZZING
import CLibFuzzer
#endif

/// One fuzz input in, nothing out: the shape libFuzzer calls. A bug is a trap
/// (a failed check, an out-of-range index, a broken invariant) inside it.
public typealias FuzzInput = @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32

/// The `main` of every fuzz target.
///
/// Built with `-sanitize=fuzzer -DFUZZING` (scripts/fuzz), it hands the command
/// line to libFuzzer, which takes all of libFuzzer's options and corpus folders.
/// Built normally, it replays the files and folders it is given through the
/// same function, so a corpus is a regression test without libFuzzer.
public enum FuzzMain {
    public static func run(_ name: String, _ input: FuzzInput) -> Never {
        #if FUZZING
        var argc = CommandLine.argc
        var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
        exit(LLVMFuzzerRunDriver(&argc, &argv, input))
        #else
        let paths = Array(CommandLine.arguments.dropFirst())
        guard !paths.isEmpty, !paths.contains(where: { $0.hasPrefix("-") }) else {
            FileHandle.standardError.write(Data("""
                usage: \(name) FILE-OR-FOLDER...
                replays each input once (this build has no libFuzzer: scripts/fuzz builds one that fuzzes)

                """.utf8))
            exit(2)
        }
        do {
            let count = try Replay.run(paths) { bytes in
                bytes.withUnsafeBufferPointer { _ = input($0.baseAddress, $0.count) }
            }
            print("\(name): replayed \(count) inputs, none crashed")
            exit(0)
        } catch {
            FileHandle.standardError.write(Data("\(name): \(error)\n".utf8))
            exit(1)
        }
        #endif
    }
}
