import Foundation
import Glibc

/// Runs saved inputs through a fuzz function, one after the other. A crash
/// names the input it happened on (on stderr, from a signal handler), so a
/// failing corpus replay in CI says which file to look at.
public enum Replay {
    public struct Failure: Error, CustomStringConvertible {
        public var description: String
    }

    /// The files named, and the files directly inside the folders named, in
    /// name order. Returns how many inputs ran.
    @discardableResult
    public static func run(_ paths: [String], _ body: ([UInt8]) -> Void) throws -> Int {
        var files: [String] = []
        for path in paths {
            var isFolder: ObjCBool = false
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isFolder) else {
                throw Failure(description: "no such file or folder: \(path)")
            }
            if isFolder.boolValue {
                let names = try FileManager.default.contentsOfDirectory(atPath: path).filter { !$0.hasPrefix(".") }.sorted()
                files += names.map { path + "/" + $0 }.filter { !isDirectory($0) }
            } else {
                files.append(path)
            }
        }
        installCrashNote()
        defer { setCrashNote(nil) }
        for file in files {
            guard let data = FileManager.default.contents(atPath: file) else {
                throw Failure(description: "cannot read \(file)")
            }
            setCrashNote("fuzz replay: crashed on input \(file)\n")
            body(Array(data))
        }
        return files.count
    }

    private static func isDirectory(_ path: String) -> Bool {
        var isFolder: ObjCBool = false
        return FileManager.default.fileExists(atPath: path, isDirectory: &isFolder) && isFolder.boolValue
    }
}

// The note a crash prints: prepared before each input, because a signal
// handler may only write(2) bytes that already exist.
nonisolated(unsafe) private var crashNote: UnsafeMutableBufferPointer<UInt8>?

private func setCrashNote(_ text: String?) {
    let old = crashNote
    crashNote = nil
    old?.deallocate()
    guard let text else { return }
    let bytes = Array(text.utf8)
    let note = UnsafeMutableBufferPointer<UInt8>.allocate(capacity: bytes.count)
    _ = note.initialize(from: bytes)
    crashNote = note
}

// What was installed before (the Swift runtime's backtracer, say), to hand the
// signal on to after the note.
nonisolated(unsafe) private let previousActions = UnsafeMutablePointer<sigaction>.allocate(capacity: 65)

nonisolated(unsafe) private var crashNoteInstalled = false

private func installCrashNote() {
    guard !crashNoteInstalled else { return }
    crashNoteInstalled = true
    for signal in [SIGILL, SIGTRAP, SIGABRT, SIGSEGV, SIGBUS, SIGFPE] {
        var action = sigaction()
        action.__sigaction_handler.sa_handler = { signal in
            if let note = crashNote { _ = write(2, note.baseAddress, note.count) }
            sigaction(signal, previousActions + Int(signal), nil)
            raise(signal)
        }
        sigemptyset(&action.sa_mask)
        sigaction(signal, &action, previousActions + Int(signal))
    }
}
