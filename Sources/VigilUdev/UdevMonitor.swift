internal import CUdev
import Glibc
import SystemPackage
import VigilSystem

/// Hot-plug events from a netlink socket, for the daemon's epoll loop:
/// watch `fd` for readability, then call `receive()` until it returns nil.
///
/// The default source is udevd: it forwards each kernel uevent after its
/// rules ran, so the device's properties (ID_*, VIGIL_*, DEVLINKS) are
/// complete and the node's group and mode already set. Without udevd
/// (these development machines, many containers) nothing ever arrives:
/// that is why the host-tier tests use umockdev, which feeds libudev's
/// monitor socket itself, and why the lab tier boots a guest with udevd.
///
/// Not thread-safe, not `Sendable`: use it on the thread of its `Udev`.
public final class UdevMonitor {
    public enum Source: String, Sendable {
        /// Events after udevd processed them (properties and links complete).
        case udev
        /// Raw kernel uevents, before udevd: no ID_* or VIGIL_* properties,
        /// and the node may not exist or have its group yet. Works without udevd.
        case kernel
    }

    /// Non-blocking, close-on-exec; owned by the monitor.
    public let fd: Int32
    /// The receive buffer the kernel granted, in bytes (it reports double the request).
    public let receiveBufferSize: Int
    private let udev: Udev  // libudev's monitor does not keep its context alive
    private let handle: OpaquePointer

    /// Starts listening at once; events from before this call are not
    /// delivered (enumerate after creating the monitor, so nothing falls in
    /// the gap, and treat an "add" of a known device as a no-op).
    ///
    /// - Parameters:
    ///   - subsystems: only these; the filter runs in the kernel (BPF), so
    ///     other devices' events do not even wake the loop.
    ///   - receiveBufferSize: enlarged from the default (~200 KB) because a
    ///     hub with many devices plugged at once overflows it (ENOBUFS, and
    ///     the lost events are gone). Past `net.core.rmem_max` it needs
    ///     CAP_NET_ADMIN, which vigild.service's bounding set does not
    ///     give: the buffer is then `rmem_max`'s (see `receiveBufferSize`).
    public init(
        udev: Udev,
        source: Source = .udev,
        subsystems: [String] = ["tty", "usb"],
        receiveBufferSize: Int = 4 << 20
    ) throws {
        guard let handle = udev_monitor_new_from_netlink(udev.handle, source.rawValue) else {
            throw SystemError(Errno(rawValue: errno), "udev_monitor_new_from_netlink(\(source.rawValue))")
        }
        self.udev = udev
        self.handle = handle
        do {
            for subsystem in subsystems {
                try checkUdev("udev_monitor_filter_add_match_subsystem_devtype", subsystem) {
                    udev_monitor_filter_add_match_subsystem_devtype(handle, subsystem, nil)
                }
            }
            // libudev sets SO_RCVBUF (the kernel caps it at rmem_max), then,
            // if that fell short, SO_RCVBUFFORCE, which fails with EPERM
            // without CAP_NET_ADMIN: the capped buffer stays, and will do.
            // (Treating EPERM as fatal disabled accessories under the unit.)
            let resized = udev_monitor_set_receive_buffer_size(handle, Int32(clamping: receiveBufferSize))
            if resized < 0 && -resized != EPERM {
                throw SystemError(Errno(rawValue: -resized), "udev_monitor_set_receive_buffer_size")
            }
            try checkUdev("udev_monitor_enable_receiving") { udev_monitor_enable_receiving(handle) }
            let fd = udev_monitor_get_fd(handle)
            guard fd >= 0 else { throw SystemError(Errno(rawValue: -fd), "udev_monitor_get_fd") }
            // libudev already makes it non-blocking and close-on-exec; make sure.
            let flags = fcntl(fd, F_GETFL)
            if flags >= 0 && flags & O_NONBLOCK == 0 { _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK) }
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            self.fd = fd
            var size: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, &length)
            self.receiveBufferSize = Int(size)
        } catch {
            udev_monitor_unref(handle)
            throw error
        }
    }

    deinit {
        udev_monitor_unref(handle)  // closes fd
    }

    /// The next pending event, or nil when none is pending. A message that
    /// the filter drops or that is malformed is skipped. Never blocks.
    public func receive() -> UdevDevice? {
        guard let device = udev_monitor_receive_device(handle) else { return nil }
        defer { udev_device_unref(device) }
        return UdevDevice(device)
    }
}

@available(*, unavailable, message: "libudev is not thread-safe: keep a Udev on one thread")
extension Udev: Sendable {}

@available(*, unavailable, message: "libudev is not thread-safe: keep a UdevMonitor on one thread")
extension UdevMonitor: Sendable {}
