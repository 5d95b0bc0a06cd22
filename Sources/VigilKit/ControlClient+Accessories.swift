import VigilProtocol

/// Accessories for the control role: what `vigilctl accessories` lists and
/// watches, and the terminal of `vigilctl accessory open`.
extension ControlClient {
    /// Every connected accessory, and every open session with its traffic and loss counters.
    public func accessories() async throws -> AccessoryList {
        try await connection.request(ListAccessories())
    }

    /// The accessories now, and from then on each connect and disconnect as the
    /// daemon pushes it (nothing falls between the list and the first change).
    /// The changes finish when the connection closes.
    public func watchAccessories() async throws -> AccessoryWatch {
        let (changes, continuation) = AsyncStream.makeStream(of: AccessoryEvent.self)
        let pushes = self.pushes
        do {
            let list = try await connection.request(WatchAccessories(), expecting: AccessoryList.self) { _ in
                pushes.addWatcher(continuation)
            }
            return AccessoryWatch(accessories: list.accessories, sessions: list.sessions ?? [], changes: changes)
        } catch {
            continuation.finish()
            throw error
        }
    }

    /// Opens a session for a person's terminal. Control sessions bypass the
    /// event queue: the daemon pushes the device's bytes as it reads them, and
    /// closes the session when this connection closes.
    public func openSession(connectionID: UInt64, protocol: String, lineSettings: String? = nil) async throws -> ControlSession {
        let (output, continuation) = AsyncStream.makeStream(of: ControlSession.Output.self)
        let pushes = self.pushes
        let request = OpenSession(connectionID: connectionID, protocol: `protocol`, lineSettings: lineSettings)
        do {
            let opened = try await connection.request(request, expecting: SessionOpened.self) { reply in
                guard let opened = try? reply.decode(SessionOpened.self) else { return }
                pushes.addSession(opened.session, continuation)
            }
            return ControlSession(id: opened.session, accessory: opened.accessory, output: output)
        } catch {
            continuation.finish()
            throw error
        }
    }

    /// Writes to a session and returns once the device has taken every byte
    /// (in pieces of at most 64 KiB, each awaited): the caller is held back at the device's pace.
    public func write(_ bytes: [UInt8], session: Int) async throws {
        var offset = 0
        while offset < bytes.count {
            let end = min(offset + AccessorySession.writeChunk, bytes.count)
            _ = try await connection.request(WriteToSession(session: session), body: Array(bytes[offset..<end]), expecting: BytesWritten.self)
            offset = end
        }
    }

    /// A HID session's report descriptor.
    public func hidReportDescriptor(session: Int) async throws -> [UInt8] {
        try await connection.requestWithBody(GetHIDReportDescriptor(session: session), expecting: HIDReportReply.self).body
    }

    /// Reads feature report `id` of a HID session (room for `length` bytes, the id included).
    public func hidFeatureReport(session: Int, id: UInt8, length: Int) async throws -> [UInt8] {
        try await connection.requestWithBody(
            GetHIDFeatureReport(session: session, reportID: Int(id), length: length), expecting: HIDReportReply.self).body
    }

    /// Sends a feature report (its id first) on a HID session.
    public func setHIDFeatureReport(_ report: [UInt8], session: Int) async throws {
        _ = try await connection.request(SetHIDFeatureReport(session: session), body: report, expecting: HIDReportReply.self)
    }

    /// Sets DTR and/or RTS of a session (nil leaves a line as it is) and reads every line.
    @discardableResult
    public func sessionLines(_ session: Int, dtr: Bool? = nil, rts: Bool? = nil) async throws -> SessionLines {
        try await connection.request(SetSessionLines(session: session, dtr: dtr, rts: rts), expecting: SessionLinesReply.self).lines
    }

    /// Sends a break of `milliseconds`; returns when it is over.
    public func sendBreak(session: Int, milliseconds: Int) async throws {
        _ = try await connection.request(SendBreak(session: session, milliseconds: milliseconds), expecting: Done.self)
    }

    /// Watches the session's input lines: changes come on its output as `.lines`.
    @discardableResult
    public func watchSessionLines(_ session: Int, enabled: Bool = true, intervalMilliseconds: Int? = nil) async throws -> SessionLines {
        try await connection.request(
            WatchSessionLines(session: session, enabled: enabled, intervalMilliseconds: intervalMilliseconds),
            expecting: SessionLinesReply.self).lines
    }

    /// Applies RS-485 settings to a session; returns what the driver took.
    @discardableResult
    public func setRS485(session: Int, _ settings: RS485Config) async throws -> RS485Config {
        try await connection.request(SetSessionRS485(session: session, rs485: settings), expecting: RS485Reply.self).rs485
    }

    /// Closes a session this client opened; its output finishes.
    public func closeSession(_ session: Int) async throws {
        defer { pushes.removeSession(session) }
        _ = try await connection.request(CloseSession(session: session), expecting: Done.self)
    }
}

/// `watchAccessories`: the state when the watch began, then the changes.
public struct AccessoryWatch: Sendable {
    public let accessories: [AccessoryInfo]
    public let sessions: [SessionInfo]
    /// `connected` and `disconnected`, in order.
    public let changes: AsyncStream<AccessoryEvent>
}

/// A control client's session with an accessory.
public struct ControlSession: Sendable {
    public let id: Int
    /// The accessory as it was opened.
    public let accessory: AccessoryInfo
    /// The device's bytes, then `.closed` if the daemon or a lost connection
    /// ended the session (after `closeSession` it just finishes).
    public let output: AsyncStream<Output>

    public enum Output: Sendable, Equatable {
        case data([UInt8])
        /// Closed by the daemon (the device hung up or was unplugged, a read or
        /// write failed), or the connection to vigild was lost.
        case closed(reason: String)
        /// A `reopen` session lost its accessory (`reason`); data follows
        /// again on this stream once the accessory returns.
        case waitingToReopen(reason: String)
        /// Watched modem lines changed (`watchSessionLines`).
        case lines(SessionLines, changed: [String])
    }
}
