internal import CVigilShim
import Glibc
import Synchronization
import SystemPackage
import VigilSystem

/// A pty pair standing in for a serial device: the device side is what a
/// `SerialPort` opens by `devicePath`, the controller is the "hardware" a
/// test, the lab or a benchmark drives.
///
/// Raw mode from the start. The device side is not held open: until
/// someone opens `devicePath`, and again after the last device-side fd
/// closes, reads on the controller fail with EIO (POLLHUP), the way a
/// gadget sees its host go away. Closing the controller hangs up every
/// device-side fd: that is "unplug".
///
/// A class, closed on `close()` or deinit, so that closing twice cannot
/// close someone else's fd that reused the number (parallel tests did).
public final class PseudoTerminal: Sendable {
    /// Non-blocking, close-on-exec. Invalid after `close()`.
    public let controller: Int32
    /// e.g. /dev/pts/7.
    public let devicePath: String
    private let isClosed = Atomic(false)

    private init(controller: Int32, devicePath: String) {
        self.controller = controller
        self.devicePath = devicePath
    }

    deinit {
        close()
    }

    public static func open() throws -> PseudoTerminal {
        var controller: Int32 = -1
        var device: Int32 = -1
        var name = [CChar](repeating: 0, count: 128)
        try check("openpty") { vigil_openpty(&controller, &device, &name, name.count) }
        _ = Glibc.close(device)
        let path = name.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        return PseudoTerminal(controller: controller, devicePath: path)
    }

    /// Hangs up the device side. Idempotent.
    public func close() {
        guard !isClosed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        _ = Glibc.close(controller)
    }
}
