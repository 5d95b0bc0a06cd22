import Glibc
import SystemPackage

/// The handful of file operations cgroup and socket code needs, with errors
/// that name the path. Small pseudo-files (cgroupfs, procfs) are read whole.
enum FileSystem {
    static func read(_ path: String) throws(SystemError) -> String {
        let fd = try open(path, FileDescriptor.AccessMode.readOnly)
        defer { try? fd.close() }
        return try read(fd, path: path)
    }

    /// Reads from offset 0 to EOF through an already open descriptor.
    static func read(_ fd: FileDescriptor, path: String) throws(SystemError) -> String {
        var bytes: [UInt8] = []
        var offset: Int64 = 0
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = try context("read", path) {
                try chunk.withUnsafeMutableBytes { try fd.read(fromAbsoluteOffset: offset, into: $0) }
            }
            if count == 0 { return String(decoding: bytes, as: UTF8.self) }
            bytes += chunk[..<count]
            offset += Int64(count)
        }
    }

    /// One write(2) of the whole string, as cgroupfs control files expect.
    static func write(_ string: String, to path: String) throws(SystemError) {
        let fd = try open(path, .writeOnly)
        defer { try? fd.close() }
        _ = try context("write", path) { try fd.writeAll(string.utf8) }
    }

    static func open(_ path: String, _ mode: FileDescriptor.AccessMode) throws(SystemError) -> FileDescriptor {
        try context("open", path) { try FileDescriptor.open(path, mode, options: .closeOnExec) }
    }

    /// mkdir -p; existing directories are fine.
    static func createDirectories(_ path: String, permissions: mode_t) throws(SystemError) {
        var prefix = path.hasPrefix("/") ? "" : "."
        for component in path.split(separator: "/") {
            prefix += "/" + component
            if mkdir(prefix, permissions) != 0 && errno != EEXIST {
                throw SystemError.current("mkdir", path: prefix)
            }
        }
    }

    static func exists(_ path: String) -> Bool {
        access(path, F_OK) == 0
    }

    /// Device and inode: tells whether a path still names the file we made.
    struct Identity: Hashable, Sendable {
        var device: UInt64
        var inode: UInt64
        var isSocket: Bool
    }

    static func identity(_ path: String) -> Identity? {
        var info = stat()
        guard lstat(path, &info) == 0 else { return nil }
        return Identity(
            device: UInt64(info.st_dev), inode: UInt64(info.st_ino),
            isSocket: info.st_mode & S_IFMT == S_IFSOCK)
    }

    /// Maps swift-system's bare `Errno` into a `SystemError` naming the path.
    static func context<Result>(
        _ operation: String, _ path: String, _ body: () throws -> Result
    ) throws(SystemError) -> Result {
        do {
            return try body()
        } catch let error as Errno {
            throw SystemError(error, operation, path: path)
        } catch {
            throw SystemError(.ioError, operation, path: path)
        }
    }
}
