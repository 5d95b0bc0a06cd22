import CDBus
import VigilSystem

/// Method calls out, replies in.
///
/// Calls are tracked by serial in our own table rather than with libdbus
/// pending calls: one place to fail them all when the bus goes away (libdbus
/// pending calls can hang then), and the timeout is a loop timer.
extension DBusConnection {
    struct PendingCall {
        var continuation: CheckedContinuation<DBusMessage, any Error>
        var timer: TimerID
    }

    /// Calls a method and returns the reply's body.
    ///
    /// Throws the peer's error reply as `DBusError`; `NoReply` when no answer
    /// came within `timeout`; `Disconnected` if the connection is or becomes
    /// closed; `InvalidArgs` for an invalid name or value (checked before
    /// libdbus sees it); `CancellationError` if the task is cancelled.
    /// Unix fds in the reply belong to the caller.
    public func call(
        destination: String?,
        path: ObjectPath,
        interface: String?,
        member: String,
        arguments: [DBusValue] = [],
        timeout: Duration = .seconds(25)
    ) async throws -> [DBusValue] {
        let message = DBusMessage.methodCall(
            destination: destination, path: path, interface: interface, member: member, body: arguments)
        return try await call(message, timeout: timeout).body
    }

    /// A call to the bus itself (org.freedesktop.DBus), with typed errors.
    func callBus(_ member: String, _ arguments: [DBusValue] = []) async throws(DBusError) -> [DBusValue] {
        let message = DBusMessage.methodCall(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
            interface: "org.freedesktop.DBus", member: member, body: arguments)
        do {
            return try await call(message).body
        } catch let error as DBusError {
            throw error
        } catch {
            throw .failed("\(error)")
        }
    }

    /// Sends a method call and returns the whole reply message.
    public func call(_ message: DBusMessage, timeout: Duration = .seconds(25)) async throws -> DBusMessage {
        guard message.kind == .methodCall else { throw DBusError.invalidArgs("call() needs a method call") }
        let raw = try prepare(message)
        let cancellation = CallCancellation()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let serial: UInt32
                do {
                    serial = try send(raw)
                } catch {
                    continuation.resume(throwing: error)
                    return
                }
                let timer = loop.schedule(after: timeout) { [self] in
                    assumeIsolated {
                        $0.finishCall(serial, .failure(DBusError.noReply(
                            "no reply to \(message.interface ?? "").\(message.member ?? "") within \(timeout)")))
                    }
                }
                pendingCalls[serial] = PendingCall(continuation: continuation, timer: timer)
                if cancellation.started(serial) {
                    finishCall(serial, .failure(CancellationError()))
                }
            }
        } onCancel: { [self] in
            guard let serial = cancellation.cancel() else { return }
            loop.execute { [self] in
                assumeIsolated { $0.finishCall(serial, .failure(CancellationError())) }
            }
        }
    }

    /// Sends a message without waiting for an answer (signals, replies,
    /// calls flagged no-reply-expected); returns its serial.
    @discardableResult
    public func send(_ message: DBusMessage) throws(DBusError) -> UInt32 {
        try send(prepare(message))
    }

    /// Emits a signal.
    public func emitSignal(
        path: ObjectPath, interface: String, member: String, arguments: [DBusValue] = [], destination: String? = nil
    ) throws(DBusError) {
        try send(.signal(path: path, interface: interface, member: member, body: arguments, destination: destination))
    }

    /// Builds the libdbus message, checking that the connection can carry it.
    func prepare(_ message: DBusMessage) throws(DBusError) -> RawMessage {
        guard let raw else { throw .disconnected() }
        let hasFDs = message.body.contains { $0.containsUnixFD }
        if hasFDs, dbus_connection_can_send_type(raw, CDBUS_TYPE_UNIX_FD) == 0 {
            throw DBusError(name: DBusError.Name.notSupported, message: "this connection cannot pass unix fds")
        }
        return try message.makeRaw()
    }

    func send(_ message: RawMessage) throws(DBusError) -> UInt32 {
        guard let raw else { throw .disconnected() }
        var serial: UInt32 = 0
        guard dbus_connection_send(raw, message.pointer, &serial) != 0 else {
            throw DBusError(name: DBusError.Name.noMemory, message: "dbus_connection_send failed")
        }
        return serial
    }

    /// Resolves a pending call once; later outcomes for the same serial are ignored.
    func finishCall(_ serial: UInt32, _ result: Result<DBusMessage, any Error>) {
        guard let pending = pendingCalls.removeValue(forKey: serial) else {
            if case .success(let message) = result { message.closeUnixFDs() }
            return
        }
        loop.cancelTimer(pending.timer)
        switch result {
        case .success(let message):
            if let error = message.error {
                pending.continuation.resume(throwing: error)
            } else {
                pending.continuation.resume(returning: message)
            }
        case .failure(let error):
            pending.continuation.resume(throwing: error)
        }
    }

    /// A reply or error for one of our calls: decoded only if someone waits for it.
    func handleReply(_ message: OpaquePointer) -> Bool {
        let serial = dbus_message_get_reply_serial(message)
        guard pendingCalls[serial] != nil else { return false }
        finishCall(serial, .success(DBusMessage(decoding: message)))
        return true
    }
}

/// Links a call's serial with task cancellation, which may happen on any
/// thread, before or after the call was sent.
private final class CallCancellation: Sendable {
    private let state = Locked<(serial: UInt32?, cancelled: Bool)>((nil, false))

    /// Records the serial; true if the task was cancelled already.
    func started(_ serial: UInt32) -> Bool {
        state.withLock { state in
            state.serial = serial
            return state.cancelled
        }
    }

    /// Marks cancellation; returns the serial if the call is under way.
    func cancel() -> UInt32? {
        state.withLock { state in
            state.cancelled = true
            return state.serial
        }
    }
}
