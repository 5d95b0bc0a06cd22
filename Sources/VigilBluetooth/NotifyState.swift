import Glibc
import VigilDBus
import VigilProtocol
import VigilSystem

/// One characteristic's notifications as vigild runs them for all its
/// subscribers: started once, whatever the number of clients. Used only on
/// the central's loop (hence unchecked).
final class NotifyState: @unchecked Sendable {
    enum Mode { case startNotify, acquired }
    let address: String
    /// What subscribers name it by (canonical), found once rather than per value.
    let key: CharacteristicPath
    /// `acquired` until AcquireNotify fails; then StartNotify.
    var mode: Mode
    /// The AcquireNotify socket and its watch.
    var fd: Int32?
    var watch: WatchID?
    /// When the socket was last read: within `BluetoothCentral.notificationReadInterval`
    /// of it the next read waits (the watch paused, `readPaused`).
    var lastRead: MonotonicInstant?
    /// How many values that read took: a fast source is read without pause.
    var lastReadCount = 0
    var readPaused = false

    init(address: String, key: CharacteristicPath, mode: Mode) {
        self.address = address
        self.key = key
        self.mode = mode
    }

    /// Ends our side: the fd is closed (BlueZ then stops notifying); a
    /// StartNotify session ends with the link or is stopped by the caller.
    func close(loop: EventLoop, path: ObjectPath) {
        if let watch { loop.removeWatch(watch) }
        if let fd { Glibc.close(fd) }
        watch = nil
        fd = nil
    }
}
