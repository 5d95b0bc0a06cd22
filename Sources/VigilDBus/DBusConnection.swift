import CDBus
import Glibc
import VigilSystem

/// A connection to a message bus, driven by an `EventLoop`.
///
/// The actor's executor is the loop, and every libdbus call for this
/// connection happens on that one thread: libdbus's watches become loop fd
/// watches, its timeouts loop timers, and incoming messages are dispatched
/// on the loop right after they are read. There is no thread or queue of its
/// own, so signal handlers, exported-object handlers and the daemon's own
/// actors (on the same loop) all see one order of events, and a slow handler
/// elsewhere can never reorder the bus.
///
/// libdbus holds a reference to the connection (its callbacks' user data)
/// until it is closed: call `close()` when done. A connection that lost the
/// bus closes itself and fails every call in flight.
public actor DBusConnection {
    public nonisolated let loop: EventLoop
    public nonisolated var unownedExecutor: UnownedSerialExecutor { loop.asUnownedSerialExecutor() }

    /// nil before connecting and once closed.
    var raw: OpaquePointer?
    /// The name the bus assigned at Hello, e.g. ":1.42".
    public private(set) var uniqueName: String?

    // Loop glue (DBusConnection+LoopGlue.swift).
    var fdWatches: [Int32: FDWatch] = [:]
    /// libdbus timeouts we know of, with the loop timer while one is armed.
    var timeouts: [LibDBusHandle: TimerID?] = [:]
    var dispatchScheduled = false

    // Calls (DBusConnection+Calls.swift).
    var pendingCalls: [UInt32: PendingCall] = [:]

    // Signals (DBusConnection+Signals.swift).
    var subscriptions: [UInt64: Subscription] = [:]
    var nextSubscriptionID: UInt64 = 1
    var disconnectHandlers: [@Sendable (DBusError) -> Void] = []
    var disconnectReason: DBusError?

    // Exported objects (DBusConnection+Exports.swift).
    var exports: [ObjectPath: Export] = [:]
    var unansweredCallHandler: (@Sendable (DBusMessage) -> Void)?

    init(loop: EventLoop) {
        self.loop = loop
    }

    // MARK: Opening

    /// Connects to the bus at `address` (a D-Bus address such as
    /// "unix:path=/run/dbus/system_bus_socket"), on a private connection of
    /// our own, and registers with Hello.
    public static func open(address: String, on loop: EventLoop) async throws(DBusError) -> DBusConnection {
        let connection = DBusConnection(loop: loop)
        try await connection.connect(address: address)
        return connection
    }

    /// The system bus (BlueZ's), at DBUS_SYSTEM_BUS_ADDRESS if set.
    public static func system(on loop: EventLoop) async throws(DBusError) -> DBusConnection {
        try await open(address: DBusAddress.system, on: loop)
    }

    /// The session bus, at DBUS_SESSION_BUS_ADDRESS, else $XDG_RUNTIME_DIR/bus.
    public static func session(on loop: EventLoop) async throws(DBusError) -> DBusConnection {
        if let address = environment("DBUS_SESSION_BUS_ADDRESS") {
            return try await open(address: address, on: loop)
        }
        if let runtime = environment("XDG_RUNTIME_DIR"), access(runtime + "/bus", F_OK) == 0 {
            return try await open(address: "unix:path=\(runtime)/bus", on: loop)
        }
        throw DBusError(name: DBusError.Name.badAddress,
                        message: "no session bus: DBUS_SESSION_BUS_ADDRESS is unset and there is no $XDG_RUNTIME_DIR/bus")
    }

    private static func environment(_ name: String) -> String? {
        getenv(name).map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 }
    }

    /// Opens the socket (a blocking connect, quick for a local socket),
    /// attaches libdbus to the loop, then says Hello asynchronously: the
    /// blocking dbus_bus_register would stall the loop while the bus answers.
    private func connect(address: String) async throws(DBusError) {
        precondition(LibDBus.initialized, "dbus_threads_init_default failed")
        guard !address.utf8.contains(0) else { throw DBusError(name: DBusError.Name.badAddress, message: "NUL in address") }
        var error = CDBus.DBusError()
        dbus_error_init(&error)
        guard let raw = dbus_connection_open_private(address, &error) else {
            throw LibDBus.take(&error, fallback: "cannot connect to \(address)")
        }
        self.raw = raw
        // libdbus would otherwise be allowed to _exit() the daemon when the bus goes away.
        dbus_connection_set_exit_on_disconnect(raw, 0)
        attachToLoop(raw)
        do throws(DBusError) {
            let reply = try await callBus("Hello")
            guard let name = reply.first?.string else { throw .failed("Hello returned no name") }
            guard dbus_bus_set_unique_name(raw, name) != 0 else { throw .init(name: DBusError.Name.noMemory) }
            uniqueName = name
        } catch {
            tearDown(.disconnected("Hello failed: \(error)"))
            throw error
        }
    }

    // MARK: State

    /// False once closed or disconnected; a closed connection stays closed.
    public var isConnected: Bool { raw != nil }

    /// Bytes queued to go out and not yet written to the socket: how a sender
    /// of many signals (GATT notifications) sees that the peer lags.
    public var outgoingBytes: Int { raw.map { Int(dbus_connection_get_outgoing_size($0)) } ?? 0 }

    /// Calls `handler` on the loop thread once, when the connection is lost or
    /// closed (at once if it already is), after every call in flight failed.
    /// BlueZ clients use it to rebuild their state on a new connection.
    public func onDisconnect(_ handler: @escaping @Sendable (DBusError) -> Void) {
        if let disconnectReason {
            handler(disconnectReason)
        } else {
            disconnectHandlers.append(handler)
        }
    }

    /// Closes the connection: calls in flight fail with Disconnected,
    /// subscriptions and exported objects end, disconnect handlers run.
    public func close() {
        tearDown(.disconnected("the connection was closed"))
    }

    /// Idempotent. Frees libdbus's side too, which releases the references
    /// its callbacks held on this actor and removes its loop watches.
    func tearDown(_ reason: DBusError) {
        guard let raw else { return }
        self.raw = nil
        disconnectReason = reason
        let failed = pendingCalls
        pendingCalls = [:]
        for (_, pending) in failed {
            loop.cancelTimer(pending.timer)
            pending.continuation.resume(throwing: reason)
        }
        subscriptions = [:]
        exports = [:]
        let handlers = disconnectHandlers
        disconnectHandlers = []
        dbus_connection_close(raw)
        dbus_connection_unref(raw)
        for handler in handlers { handler(reason) }
    }

    // MARK: Bus names

    public enum NameRequestResult: Sendable, Equatable {
        case primaryOwner, inQueue, exists, alreadyOwner
    }

    /// Asks the bus for a well-known name (RequestName). Without `queue`, a
    /// name someone else owns is `.exists` rather than a place in the queue.
    public func requestName(
        _ name: String, allowReplacement: Bool = false, replaceExisting: Bool = false, queue: Bool = false
    ) async throws(DBusError) -> NameRequestResult {
        try LibDBus.validate(.busName, name)
        var flags: UInt32 = 0
        if allowReplacement { flags |= CDBUS_NAME_FLAG_ALLOW_REPLACEMENT }
        if replaceExisting { flags |= CDBUS_NAME_FLAG_REPLACE_EXISTING }
        if !queue { flags |= CDBUS_NAME_FLAG_DO_NOT_QUEUE }
        let reply = try await callBus("RequestName", [.string(name), .uint32(flags)])
        switch reply.first?.uint32 {
        case CDBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER: return .primaryOwner
        case CDBUS_REQUEST_NAME_REPLY_IN_QUEUE: return .inQueue
        case CDBUS_REQUEST_NAME_REPLY_EXISTS: return .exists
        case CDBUS_REQUEST_NAME_REPLY_ALREADY_OWNER: return .alreadyOwner
        default: throw .failed("unexpected RequestName reply \(reply)")
        }
    }

    /// Gives a well-known name back (ReleaseName).
    public func releaseName(_ name: String) async throws(DBusError) {
        try LibDBus.validate(.busName, name)
        _ = try await callBus("ReleaseName", [.string(name)])
    }
}

/// A libdbus object pointer (watch, timeout) as a Sendable dictionary key.
/// Only ever turned back into a pointer on the loop thread, while libdbus
/// still owns the object.
struct LibDBusHandle: Hashable, Sendable {
    let bits: UInt

    init(_ pointer: OpaquePointer) {
        bits = UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(pointer)))
    }

    var pointer: OpaquePointer? { OpaquePointer(bitPattern: bits) }
}
