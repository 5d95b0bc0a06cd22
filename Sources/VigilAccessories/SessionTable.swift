import VigilProtocol
import VigilStreams

/// One accessory session: the stream session `id` (the stream layer holds
/// its log and traffic) with one accessory for one protocol.
public struct SessionRecord: Sendable, Equatable, Codable {
    public var id: Int
    public var holder: SessionHolder
    public var connectionID: UInt64
    public var identity: AccessoryIdentity
    /// The device it is, or was last, on (its USB port tells clones apart).
    public var sysPath: String
    public var protocolString: String
    public var lineSettings: String
    /// Reopen by itself when the same accessory comes back.
    public var reopen: Bool
}

/// The accessory sessions open now, at most one per accessory connection and
/// protocol. Session ids come from the stream layer, which numbers the
/// sessions of every transport.
public struct SessionTable: Sendable {
    public private(set) var sessions: [Int: SessionRecord] = [:]

    public init() {}

    /// Opens a session, or explains why not: the accessory does not speak the
    /// protocol, the app's manifest does not declare it, or someone holds it.
    public mutating func open(
        id: Int, holder: SessionHolder, accessory: AccessoryInfo, identity: AccessoryIdentity, protocol name: String,
        declaredProtocols: [String]?, lineSettings: String, reopen: Bool
    ) throws(ProtocolError) -> SessionRecord {
        guard accessory.protocolStrings.contains(name) else {
            throw ProtocolError(.invalidArgument, "accessory \(accessory.connectionID) (\(DeviceText.quoted(accessory.name))) does not speak \(DeviceText.quoted(name)); it speaks \(accessory.protocolStrings)")
        }
        if let declaredProtocols, !declaredProtocols.contains(name) {
            throw ProtocolError(.notPermitted, "the app's manifest does not declare accessory protocol '\(name)' (accessory-protocols = \(declaredProtocols))")
        }
        if let holderSession = sessions.values.first(where: { $0.connectionID == accessory.connectionID && $0.protocolString == name }) {
            // Its own holder asking again (an app reconnecting after a daemon
            // restart, which re-established the session for it) gets it back.
            if holderSession.holder == holder { return holderSession }
            throw ProtocolError(.invalidState, "accessory \(accessory.connectionID) protocol '\(name)' is already held by \(holderSession.holder) (session \(holderSession.id))")
        }
        let record = SessionRecord(
            id: id, holder: holder, connectionID: accessory.connectionID, identity: identity,
            sysPath: accessory.sysPath, protocolString: name, lineSettings: lineSettings, reopen: reopen)
        sessions[record.id] = record
        return record
    }

    /// Whether `open` would find the holder's own session (and return it).
    public func existing(holder: SessionHolder, connectionID: UInt64, protocol name: String) -> SessionRecord? {
        sessions.values.first { $0.connectionID == connectionID && $0.protocolString == name && $0.holder == holder }
    }

    /// Takes back the sessions an earlier daemon recorded, all waiting for
    /// their accessory; the daemon reopens them.
    public mutating func restore(_ records: [SessionRecord]) {
        // Connection ids are the dead daemon's: none is connected now (ids start at 1).
        for var record in records {
            record.connectionID = 0
            sessions[record.id] = record
        }
    }

    @discardableResult
    public mutating func close(_ id: Int) -> SessionRecord? {
        sessions.removeValue(forKey: id)
    }

    /// Moves a reopening session onto the accessory's new connection.
    public mutating func rebind(_ id: Int, to accessory: AccessoryInfo) {
        sessions[id]?.connectionID = accessory.connectionID
        sessions[id]?.sysPath = accessory.sysPath
    }

    /// The waiting `reopen` sessions (`isWaiting`) that move to a new connection
    /// of their accessory: at most one per protocol, the oldest, since a
    /// connection has one session per protocol. When two devices have claimed
    /// the identity at once (`byPortOnly`: cloned serial numbers), only the
    /// sessions last on the same USB port: a clone never takes another
    /// device's session.
    /// `restoring`: sessions re-established after a daemon restart, which
    /// move to their accessory whether or not they asked to reopen.
    public func toReopen(
        on accessory: AccessoryInfo, identity: AccessoryIdentity, byPortOnly: Bool, restoring: Set<Int> = [],
        isWaiting: (Int) -> Bool
    ) -> [SessionRecord] {
        let port = AccessoryIdentity.usbPortPath(accessory.sysPath)
        var held = Set(sessions(of: accessory.connectionID).map(\.protocolString))
        return sessions.values.sorted { $0.id < $1.id }.filter { record in
            (record.reopen || restoring.contains(record.id)) && record.identity == identity && isWaiting(record.id)
                && (!byPortOnly || AccessoryIdentity.usbPortPath(record.sysPath) == port)
                && held.insert(record.protocolString).inserted
        }
    }

    public func sessions(of connectionID: UInt64) -> [SessionRecord] {
        sessions.values.filter { $0.connectionID == connectionID }.sorted { $0.id < $1.id }
    }

    public func sessions(heldBy holder: SessionHolder) -> [SessionRecord] {
        sessions.values.filter { $0.holder == holder }.sorted { $0.id < $1.id }
    }
}

/// When a waiting `reopen` session tries its accessory's node again after the
/// open failed while the accessory stayed connected (a node busy for a moment,
/// or gone again before its remove event was read): the delay doubles from
/// `first` up to `limit`, so a node that keeps failing costs an open every few
/// seconds, never a busy loop. A new connection of the accessory starts over.
public struct ReopenBackoff: Sendable, Equatable {
    public static let first: Duration = .milliseconds(50)
    public static let limit: Duration = .seconds(5)

    /// Failed opens on this connection so far.
    public private(set) var failures = 0

    public init() {}

    /// Counts a failed open; returns how long to wait before the next one.
    public mutating func failed() -> Duration {
        failures += 1
        var delay = Self.first
        for _ in 1..<failures where delay < Self.limit { delay *= 2 }
        return min(delay, Self.limit)
    }
}
