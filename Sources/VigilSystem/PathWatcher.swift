import CVigilShim
import Glibc

/// Tells, without polling, when a path may have appeared: e.g. a bus socket
/// that a daemon not yet started will create.
///
/// It watches (inotify) the deepest directory of the path that exists,
/// moves down as the missing directories appear and back up when a watched
/// one is deleted or moved, and calls `handler` on the loop thread:
/// - when an entry named like the path's last component is created, moved
///   in, or has its attributes changed in the path's directory (a listening
///   socket appears at bind(2); dbus-daemon chmods it once it listens, so an
///   attempt refused in between gets a second chance);
/// - when the watch moved and the path exists (a whole tree appeared at once);
/// - once, soon after `init`, if the path exists already, so that a caller
///   whose attempt failed just before the watch began misses nothing;
/// - after the kernel's event queue overflowed.
///
/// A call means "try again", not "it is there": the caller's attempt decides.
/// Nothing runs while nothing changes in the watched directory.
public final class PathWatcher: Sendable {
    public let path: String
    private let loop: EventLoop
    private let fd: Int32
    private let state: Locked<State>
    private let handler: @Sendable () -> Void

    private struct State: Sendable {
        var loopWatch: WatchID?
        /// The inotify watch and how many of the path's components its directory has.
        var watch: (descriptor: Int32, depth: Int)?
        var cancelled = false
    }

    /// The inotify event bits this type reads (<sys/inotify.h>; Linux ABI).
    private enum Mask {
        static let attributes: UInt32 = 0x0000_0004  // IN_ATTRIB
        static let movedTo: UInt32 = 0x0000_0080  // IN_MOVED_TO
        static let create: UInt32 = 0x0000_0100  // IN_CREATE
        static let deleteSelf: UInt32 = 0x0000_0400  // IN_DELETE_SELF
        static let moveSelf: UInt32 = 0x0000_0800  // IN_MOVE_SELF
        static let overflow: UInt32 = 0x0000_4000  // IN_Q_OVERFLOW
        static let ignored: UInt32 = 0x0000_8000  // IN_IGNORED
    }

    /// The path's components, e.g. ["run", "dbus", "system_bus_socket"].
    private let components: [String]

    /// `path` should be absolute; a relative one is taken from the current directory.
    public init(path: String, on loop: EventLoop, _ handler: @escaping @Sendable () -> Void) throws {
        var absolute = path
        if !path.hasPrefix("/") {
            var buffer = [CChar](repeating: 0, count: Int(PATH_MAX))
            if getcwd(&buffer, buffer.count) != nil {
                absolute = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) + "/" + path
            }
        }
        self.path = absolute
        self.loop = loop
        self.handler = handler
        components = absolute.split(separator: "/").map(String.init).filter { $0 != "." }
        state = Locked(State())
        fd = try check("inotify_init1") { vigil_inotify_init() }
        let exists = rewatch()
        do {
            let id = try loop.watch(fd, for: .readable) { [weak self] _ in self?.readEvents() }
            let cancelled = state.withLock { state in
                state.loopWatch = id
                return state.cancelled
            }
            if cancelled { loop.removeWatch(id) }
        } catch {
            _ = Glibc.close(fd)
            throw error
        }
        if exists {
            loop.execute { [weak self] in self?.notify() }
        }
    }

    deinit {
        _ = Glibc.close(fd)
    }

    /// Stops watching. Idempotent. Once it returns on the loop thread the
    /// handler is not called again.
    public func cancel() {
        let loopWatch = state.withLock { state -> WatchID? in
            state.cancelled = true
            if let watch = state.watch { _ = vigil_inotify_unwatch(fd, watch.descriptor) }
            state.watch = nil
            defer { state.loopWatch = nil }
            return state.loopWatch
        }
        if let loopWatch { loop.removeWatch(loopWatch) }
    }

    private var isCancelled: Bool { state.withLock { $0.cancelled } }

    private func notify() {
        guard !isCancelled else { return }
        handler()
    }

    private func directory(depth: Int) -> String {
        "/" + components.prefix(depth).joined(separator: "/")
    }

    private static func isDirectory(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR
    }

    /// Watches the deepest existing directory on the way to the path (the
    /// root at worst). Returns whether the path itself exists now.
    @discardableResult
    private func rewatch() -> Bool {
        let parentDepth = max(components.count - 1, 0)
        while true {
            var depth = parentDepth
            while depth > 0 && !Self.isDirectory(directory(depth: depth)) { depth -= 1 }
            let directory = directory(depth: depth)
            let cancelled = state.withLock { state -> Bool in
                guard !state.cancelled else { return true }
                if let watch = state.watch {
                    if watch.depth == depth { return false }
                    _ = vigil_inotify_unwatch(fd, watch.descriptor)
                    state.watch = nil
                }
                // A directory that vanished between the check and the watch: the
                // next event of its parent (or a later call) puts the watch right.
                let descriptor = vigil_inotify_watch_directory(fd, directory)
                if descriptor >= 0 { state.watch = (descriptor, depth) }
                return false
            }
            // The next directory may have been made between the check and the
            // watch, which then never heard of it: look again once it exists.
            guard !cancelled, depth < parentDepth, Self.isDirectory(self.directory(depth: depth + 1)) else { break }
        }
        return access(path, F_OK) == 0
    }

    private func readEvents() {
        var buffer = [UInt8](repeating: 0, count: 4096)
        var relevant = false
        var moved = false
        var lostWatch = false
        while true {
            let count = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            let current = state.withLock { $0.watch }
            var offset = 0
            // struct inotify_event: int wd; uint32_t mask, cookie, len; char name[len].
            while offset + 16 <= count {
                let descriptor = Self.load(Int32.self, buffer, offset)
                let mask = Self.load(UInt32.self, buffer, offset + 4)
                let length = Int(Self.load(UInt32.self, buffer, offset + 12))
                let nameBytes = buffer[(offset + 16)..<min(offset + 16 + length, count)].prefix { $0 != 0 }
                offset += 16 + length
                if mask & Mask.overflow != 0 {
                    relevant = true
                    moved = true
                    continue
                }
                guard let current, descriptor == current.descriptor else { continue }
                if mask & (Mask.deleteSelf | Mask.moveSelf | Mask.ignored) != 0 {
                    // The directory went (or moved away): watch further up.
                    lostWatch = true
                    moved = true
                    continue
                }
                guard mask & (Mask.create | Mask.movedTo | Mask.attributes) != 0,
                      current.depth < components.count,
                      String(decoding: nameBytes, as: UTF8.self) == components[current.depth] else { continue }
                if current.depth == components.count - 1 {
                    relevant = true
                } else {
                    moved = true  // a directory on the way appeared: go down
                }
            }
        }
        if moved {
            if lostWatch {
                state.withLock { state in
                    if let watch = state.watch { _ = vigil_inotify_unwatch(fd, watch.descriptor) }
                    state.watch = nil
                }
            }
            if rewatch() { relevant = true }
        }
        if relevant { notify() }
    }

    private static func load<T: FixedWidthInteger>(_: T.Type, _ buffer: [UInt8], _ offset: Int) -> T {
        buffer.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: offset, as: T.self) }
    }
}
