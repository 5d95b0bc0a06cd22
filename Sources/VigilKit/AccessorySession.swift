import VigilProtocol
import VigilSystem

/// A byte stream with an accessory for one of its protocols, as `EASession`:
/// bytes from the device arrive in `incoming` (or `bytes`), writes go out with
/// `write`, which returns once the device has taken them.
///
/// ```swift
/// let session = try await app.accessoryManager.openSession(to: sensor, protocol: "org.example.sensor")
/// for await chunk in session.bytes {
///     try store(chunk)          // done with it when the loop asks for the next one
///     await app.finishedProcessing()
/// }
/// print("ended: \(session.closeReason ?? "")")
/// ```
///
/// The `finishedProcessing()` in the loop goes out with the chunk's
/// acknowledgement when the loop comes round: one message ends the wake.
///
/// The daemon keeps the port open and reads while the app is suspended; data
/// wakes the app (one wake per burst). A chunk may merge several device reads,
/// and chunks come in device order. The daemon reads into the session's log,
/// a file this process maps read-only, and a chunk is copied from there
/// (`SessionLogReader`): what the daemon read survives its crash. Each is acknowledged when the consumer is
/// done with it (see `AcknowledgingStream`): data an app had not finished when
/// it crashed comes again to the next process, in `Application.events` as
/// `session.data` events marked `redelivered`, followed by the `session.closed`
/// of this session (a session ends with its process). Until data is
/// acknowledged it counts against the session's buffer in the daemon; when
/// that is full the daemon stops reading and flow control holds the device.
///
/// The session ends when the app calls `close()`, when the device goes away
/// (unless opened with `reopen`), when the app leaves the foreground without
/// the `external-accessory` background mode, or when the connection to vigild
/// is lost; `incoming` then yields `.closed` and finishes. Letting go of the
/// session and of every sequence taken from it closes it too.
public final class AccessorySession: Sendable {
    /// The daemon's session id, as `vigilctl accessories` lists it.
    public let id: Int
    public let protocolString: String

    private let status: Status
    private let stream: AsyncStream<Delivery<Event>>
    private let session: ApplicationSession

    /// The largest write sent as one request: a bigger one goes in pieces, each
    /// awaited, so back-pressure works at this grain and frames stay small.
    static let writeChunk = 64 * 1024

    init(id: Int, protocol: String, status: Status, stream: AsyncStream<Delivery<Event>>, session: ApplicationSession) {
        self.id = id
        self.protocolString = `protocol`
        self.status = status
        self.stream = stream
        self.session = session
    }

    deinit {
        if status.closeReason == nil { try? session.send(CloseSession(session: id)) }
        session.router.close(session: id, status: status, reason: "the app let go of the session")
    }

    /// Opens a session as `AccessoryManager.openSession` does.
    public static func open(
        _ accessory: AccessoryInfo, protocol: String, lineSettings: String? = nil, reopen: Bool = false,
        in application: Application
    ) async throws -> AccessorySession {
        try await application.accessoryManager.openSession(
            to: accessory, protocol: `protocol`, lineSettings: lineSettings, reopen: reopen)
    }

    /// The accessory, as of the last (re)open: a reopened session is on a new connection id.
    public var accessory: AccessoryInfo { status.accessory }
    /// Loss the device reported since the open, in total (each report is also a `.loss` item).
    public var loss: SessionLoss { status.loss }
    /// Why the session ended; nil while it is open (or waiting to reopen).
    public var closeReason: String? { status.closeReason }

    /// Everything about the session, in order: data, loss reports, interruption
    /// and reopening, and finally `.closed`.
    public var incoming: AcknowledgingStream<Event> { AcknowledgingStream(base: stream, owner: self) }

    /// Only the data of `incoming`, for apps that read `loss` and `closeReason`
    /// instead. It finishes when the session ends. Iterate one of the two.
    public var bytes: Bytes { Bytes(events: incoming) }

    /// Writes `bytes` to the device and returns once it has taken them all: an
    /// app that awaits each write is held back as fast as the device drains.
    /// Throws if the session has ended or is waiting for its accessory to return.
    public func write(_ bytes: [UInt8]) async throws {
        if let reason = status.closeReason {
            throw ProtocolError(.invalidState, "session \(id) is closed: \(reason)")
        }
        var offset = 0
        while offset < bytes.count {
            let end = min(offset + Self.writeChunk, bytes.count)
            _ = try await session.request(WriteToSession(session: id), body: Array(bytes[offset..<end]), expecting: BytesWritten.self)
            offset = end
        }
    }

    // MARK: HID accessories (docs/protocol.md, "HID accessories")

    /// The input reports of a HID accessory's session, each whole and in
    /// order (report id first when the device numbers its reports): its
    /// `.data` items split into records (`SessionRecords`). A report is
    /// acknowledged with the rest of its chunk, once the loop asks for the
    /// report after the chunk's last.
    ///
    /// ```swift
    /// for await report in session.reports { try handle(report) }
    /// ```
    public var reports: Reports { Reports(events: incoming) }

    /// Sends one output report (report id first; 0 when the device has
    /// none): a `write` of the session, whole.
    public func sendOutputReport(_ report: [UInt8]) async throws {
        guard report.count <= Self.writeChunk else { throw ProtocolError(.invalidArgument, "an output report of \(report.count) bytes") }
        try await write(report)
    }

    /// Reads feature report `id` with room for `length` bytes (the report
    /// id byte included); the report as the device gave it, its id first.
    public func featureReport(id: UInt8, length: Int) async throws -> [UInt8] {
        try await session.requestWithBody(
            GetHIDFeatureReport(session: self.id, reportID: Int(id), length: length), expecting: HIDReportReply.self).body
    }

    /// Sends a feature report (its id first).
    public func setFeatureReport(_ report: [UInt8]) async throws {
        _ = try await session.request(SetHIDFeatureReport(session: id), body: report, expecting: HIDReportReply.self)
    }

    /// The device's HID report descriptor.
    public func reportDescriptor() async throws -> [UInt8] {
        try await session.requestWithBody(GetHIDReportDescriptor(session: id), expecting: HIDReportReply.self).body
    }

    // MARK: Serial line control (docs/protocol.md, "Serial line control")

    /// The modem lines now. Throws `notSupported` where the driver has none (a pty).
    public func lines() async throws -> SessionLines {
        try await session.request(SetSessionLines(session: id), expecting: SessionLinesReply.self).lines
    }

    /// Raises or drops DTR and/or RTS (nil leaves a line as it is); returns every line after.
    @discardableResult
    public func setLines(dtr: Bool? = nil, rts: Bool? = nil) async throws -> SessionLines {
        try await session.request(SetSessionLines(session: id, dtr: dtr, rts: rts), expecting: SessionLinesReply.self).lines
    }

    /// Holds the line at space for `milliseconds`; returns when the break is over.
    public func sendBreak(milliseconds: Int) async throws {
        _ = try await session.request(SendBreak(session: id, milliseconds: milliseconds), expecting: Done.self)
    }

    /// Reports changes of CTS, DSR, DCD and RI as `.lines` items of
    /// `incoming`. With `wake` a change wakes the suspended app; without, it
    /// waits (coalesced) until the app runs for another reason.
    @discardableResult
    public func watchLines(wake: Bool = false, intervalMilliseconds: Int? = nil) async throws -> SessionLines {
        try await session.request(
            WatchSessionLines(session: id, enabled: true, wake: wake, intervalMilliseconds: intervalMilliseconds),
            expecting: SessionLinesReply.self).lines
    }

    /// Stops the reports of `watchLines`.
    public func stopWatchingLines() async throws {
        _ = try await session.request(WatchSessionLines(session: id, enabled: false), expecting: SessionLinesReply.self)
    }

    /// Applies RS-485 settings; returns what the driver took. Throws
    /// `notSupported` where the driver has no RS-485 mode.
    @discardableResult
    public func setRS485(_ settings: RS485Config) async throws -> RS485Config {
        try await session.request(SetSessionRS485(session: id, rs485: settings), expecting: RS485Reply.self).rs485
    }

    /// Ends the session. What `incoming` holds that was not consumed yet counts
    /// as handled (it is acknowledged, so it is not redelivered); if the session
    /// was still open, `incoming` yields `.closed` and finishes.
    public func close() async {
        if status.closeReason == nil { _ = try? await session.request(CloseSession(session: id), expecting: Done.self) }
        session.router.close(session: id, status: status, reason: "closed by the app")
    }
}

extension AccessorySession {
    /// What happens on a session, in order.
    public enum Event: Sendable, Equatable {
        /// Bytes from the device: one or more reads, in order.
        case data([UInt8])
        /// The device reported loss (counts since the previous report): bytes were
        /// lost before vigild could read them, e.g. a UART overrun.
        case loss(SessionLoss)
        /// The accessory went away; the session (opened with `reopen`) waits for
        /// the same accessory to be plugged in again. Writes fail meanwhile.
        case interrupted(reason: String)
        /// The accessory is back, on a new connection id; the session goes on.
        case reopened(AccessoryInfo)
        /// Watched modem lines changed (`watchLines`): the lines now, and the
        /// input lines that changed since the last report ("cts", "dsr", "dcd", "ri").
        case lines(SessionLines, changed: [String])
        /// The session is over; nothing follows.
        case closed(reason: String)
    }

    /// `incoming` without its notices: the bytes alone.
    public struct Bytes: AsyncSequence, Sendable {
        public typealias Element = [UInt8]
        public typealias Failure = Never

        let events: AcknowledgingStream<Event>

        public func makeAsyncIterator() -> Iterator { Iterator(base: events.makeAsyncIterator()) }

        public struct Iterator: AsyncIteratorProtocol {
            var base: AcknowledgingStream<Event>.Iterator

            public mutating func next() async -> [UInt8]? {
                while let event = await base.next() {
                    if case let .data(bytes) = event { return bytes }
                }
                return nil
            }

            public mutating func next(isolation actor: isolated (any Actor)?) async -> [UInt8]? {
                while let event = await base.next(isolation: actor) {
                    if case let .data(bytes) = event { return bytes }
                }
                return nil
            }
        }
    }

    /// `incoming`'s data as whole records: a HID session's input reports.
    /// Data that is not whole records (a serial session's bytes) ends it.
    public struct Reports: AsyncSequence, Sendable {
        public typealias Element = [UInt8]
        public typealias Failure = Never

        let events: AcknowledgingStream<Event>

        public func makeAsyncIterator() -> Iterator { Iterator(base: events.makeAsyncIterator()) }

        public struct Iterator: AsyncIteratorProtocol {
            var base: AcknowledgingStream<Event>.Iterator
            /// The reports of the current chunk not yet returned (reversed: the next is last).
            var pending: [[UInt8]] = []

            public mutating func next() async -> [UInt8]? {
                await next(isolation: nil)
            }

            public mutating func next(isolation actor: isolated (any Actor)?) async -> [UInt8]? {
                while pending.isEmpty {
                    guard let event = await base.next(isolation: actor) else { return nil }
                    guard case let .data(bytes) = event else { continue }
                    guard let records = try? SessionRecords.split(bytes) else { return nil }
                    pending = records.reversed()
                }
                return pending.removeLast()
            }
        }
    }

    /// What the session object reports, kept current by the router before it yields each item.
    final class Status: Sendable {
        private let values: Locked<Values>

        private struct Values {
            var accessory: AccessoryInfo
            var loss = SessionLoss()
            var closeReason: String?
            /// The router's connection epoch when the session was registered.
            var epoch: Int?
        }

        init(accessory: AccessoryInfo) {
            values = Locked(Values(accessory: accessory))
        }

        var accessory: AccessoryInfo { values.withLock { $0.accessory } }
        var loss: SessionLoss { values.withLock { $0.loss } }
        var closeReason: String? { values.withLock { $0.closeReason } }
        var epoch: Int? { values.withLock { $0.epoch } }

        func registered(epoch: Int) {
            values.withLock { $0.epoch = epoch }
        }

        func opened(_ accessory: AccessoryInfo) {
            values.withLock { $0.accessory = accessory }
        }

        func closed(_ reason: String) {
            values.withLock { $0.closeReason = $0.closeReason ?? reason }
        }

        /// The item a session event becomes, after updating what it changes.
        func apply(_ content: AccessoryEventContent, payload: [UInt8]) -> Event? {
            switch content {
            case .data:
                return .data(payload)
            case let .loss(_, loss):
                values.withLock { $0.loss = $0.loss + loss }
                return .loss(loss)
            case let .closed(_, reason, willReopen):
                if willReopen { return .interrupted(reason: reason) }
                closed(reason)
                return .closed(reason: reason)
            case let .reopened(_, accessory):
                opened(accessory)
                return .reopened(accessory)
            case let .lines(_, lines, changed):
                return .lines(lines, changed: changed)
            case .connected, .disconnected:
                return nil
            }
        }
    }
}
