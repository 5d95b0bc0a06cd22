import CVigilShim
import Glibc

/// A whole file mapped shared into memory: what one process stores there,
/// another process mapping the same file sees, and it outlives the process
/// that stored it (it is the page cache). Unmapped and closed on deinit.
///
/// Used for session logs: the daemon reads device bytes straight into one, and
/// apps read them in place, so a byte is copied once on its way, as with a
/// direct read, and the daemon's death does not lose it.
public final class MappedFile: @unchecked Sendable {
    // @unchecked: the pointer is fixed for the object's life; what is stored
    // through it is the owners' to order (one writer, readers that learn
    // offsets over a socket).
    public let path: String
    public let fd: Int32
    public let base: UnsafeMutableRawPointer
    public let size: Int
    public let isWritable: Bool

    private init(path: String, fd: Int32, base: UnsafeMutableRawPointer, size: Int, writable: Bool) {
        self.path = path
        self.fd = fd
        self.base = base
        self.size = size
        self.isWritable = writable
    }

    deinit {
        munmap(base, size)
        Glibc.close(fd)
    }

    /// Opens (and with `creatingSize`, creates or extends to that size) a file
    /// and maps all of it. `writable` maps it read-write; otherwise read-only.
    public static func open(
        path: String, writable: Bool, creatingSize: Int? = nil, permissions: mode_t = 0o600
    ) throws(SystemError) -> MappedFile {
        var flags = O_CLOEXEC | (writable ? O_RDWR : O_RDONLY)
        if creatingSize != nil { flags |= O_CREAT }
        let fd = try check("open", path: path) { Glibc.open(path, flags, permissions) }
        var owned = true
        defer { if owned { Glibc.close(fd) } }
        var status = stat()
        try check("fstat", path: path) { fstat(fd, &status) }
        var size = Int(status.st_size)
        if let creatingSize, size < creatingSize {
            // Sparse: pages exist only once bytes are stored in them.
            try check("ftruncate", path: path) { ftruncate(fd, off_t(creatingSize)) }
            size = creatingSize
        }
        guard size > 0 else { throw SystemError(.invalidArgument, "map (empty file)", path: path) }
        let protection = writable ? PROT_READ | PROT_WRITE : PROT_READ
        guard let base = mmap(nil, size, protection, MAP_SHARED, fd, 0), base != MAP_FAILED else {
            throw SystemError.current("mmap", path: path)
        }
        owned = false
        return MappedFile(path: path, fd: fd, base: base, size: size, writable: writable)
    }

    /// Gives the pages of a byte range back to the kernel: the file keeps its
    /// size, the range reads as zeros, and neither memory nor disk holds it.
    /// Whole pages only (a partial page at either end is kept). Returns false
    /// where the file system cannot punch holes; the bytes then stay until
    /// overwritten, which costs memory but loses nothing.
    @discardableResult
    public func release(offset: Int, count: Int) -> Bool {
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        let start = (offset + page - 1) / page * page
        let end = (offset + count) / page * page
        guard end > start else { return true }
        return vigil_punch_hole(fd, Int64(start), Int64(end - start)) == 0
    }
}
