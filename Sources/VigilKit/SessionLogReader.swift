import VigilProtocol
import VigilSystem

/// Gives `session.data` events their bytes: the daemon names a range of the
/// session's log (`log`, `offset`, `length`; docs/protocol.md, "Session
/// logs") and this copies it out of a read-only mapping of that file, the one
/// copy on the bytes' way from the device. Mappings are kept per session and
/// dropped when the session ends.
final class SessionLogReader: Sendable {
    private let mappings = Locked<[Int: MappedFile]>([:])

    /// The event with its payload filled in from the log it names; any other
    /// event as it is. A range that cannot be read (a log gone or damaged)
    /// yields the event without bytes and a `logError` attribute saying why.
    func resolve(_ event: AppEvent) -> AppEvent {
        if event.kind == AccessoryEventKind.closed, event.attributes["willReopen"] != .bool(true),
           let session = Self.integer(event.attributes["session"]) {
            mappings.withLock { _ = $0.removeValue(forKey: session) }
            return event
        }
        guard event.kind == AccessoryEventKind.data, case let .string(path)? = event.attributes["log"] else { return event }
        var resolved = event
        do {
            resolved.payload = try read(event, path: path)
        } catch {
            resolved.attributes["logError"] = .string(error.message)
        }
        return resolved
    }

    private func read(_ event: AppEvent, path: String) throws(ProtocolError) -> [UInt8] {
        guard let session = Self.integer(event.attributes["session"]),
              let offset = Self.integer(event.attributes["offset"]), let length = Self.integer(event.attributes["length"])
        else { throw ProtocolError(.invalidArgument, "session.data: session, offset and length must be whole numbers") }
        let file = try mapping(session: session, path: path)
        let capacity = SessionLogLayout.load(.capacity, from: file.base)
        guard UInt64(length) <= capacity else {
            throw ProtocolError(.invalidArgument, "session.data: length \(length) exceeds the log's capacity \(capacity)")
        }
        return SessionLogLayout.copy(from: file.base, offset: UInt64(offset), length: length)
    }

    private func mapping(session: Int, path: String) throws(ProtocolError) -> MappedFile {
        if let file = mappings.withLock({ $0[session] }), file.path == path { return file }
        let file: MappedFile
        do {
            file = try MappedFile.open(path: path, writable: false)
        } catch {
            throw ProtocolError(.invalidState, "cannot map session log: \(error)")
        }
        if let problem = SessionLogLayout.problem(in: file.base, size: file.size) {
            throw ProtocolError(.invalidState, "session log \(path): \(problem)")
        }
        mappings.withLock { $0[session] = file }
        return file
    }

    private static func integer(_ value: JSONValue?) -> Int? {
        guard let number = value?.numberValue, let integer = Int(exactly: number), integer >= 0 else { return nil }
        return integer
    }
}
