import VigilProtocol

/// The app's view of connected accessories, as `EAAccessoryManager`: the
/// accessories that speak a protocol its manifest declares, their comings and
/// goings, and sessions with them. One per `Application`: `app.accessoryManager`.
///
/// ```swift
/// let manager = app.accessoryManager
/// try await manager.registerForNotifications()
/// for accessory in try await manager.connectedAccessories() { attach(accessory) }
/// for await notification in manager.notifications {
///     switch notification {
///     case let .connected(accessory): attach(accessory)
///     case let .disconnected(accessory): detach(accessory)
///     }
/// }
/// ```
///
/// Connects and disconnects wake an app with the `external-accessory` mode;
/// while it is suspended they are queued, and a connect followed by the
/// disconnect of the same connection is not delivered at all.
public final class AccessoryManager: Sendable {
    private let session: ApplicationSession
    private let stream: AsyncStream<Delivery<AccessoryNotification>>

    init(session: ApplicationSession) {
        self.session = session
        let (stream, continuation) = AsyncStream.makeStream(of: Delivery<AccessoryNotification>.self)
        self.stream = stream
        session.router.setNotifications(continuation)
    }

    /// Connects and disconnects after `registerForNotifications()`, in order,
    /// each acknowledged when the loop asks for the next (see
    /// `AcknowledgingStream`). Iterate it from one task, for as long as the app
    /// is registered: an unconsumed notification holds back the acknowledgement
    /// of later events. Before registering in this process (as right after a
    /// relaunch, when the daemon redelivers what a crashed process had not
    /// finished), these events arrive in `Application.events` instead.
    public var notifications: AcknowledgingStream<AccessoryNotification> {
        AcknowledgingStream(base: stream, owner: nil)
    }

    /// The accessories connected now that the app may see.
    public func connectedAccessories() async throws -> [AccessoryInfo] {
        try await session.request(ListAccessories(), expecting: AccessoryList.self).accessories
    }

    /// Starts connect and disconnect notifications. The daemon keeps the
    /// registration across relaunches, and `Application` renews it after a
    /// reconnection; call it at every launch all the same, since it is what
    /// routes the notifications to `notifications` in this process.
    public func registerForNotifications() async throws {
        let router = session.router
        _ = try await session.request(RegisterForAccessoryNotifications(enabled: true), expecting: Done.self) { _ in
            router.setRegisteredForNotifications(true)
        }
    }

    public func unregisterForNotifications() async throws {
        let router = session.router
        _ = try await session.request(RegisterForAccessoryNotifications(enabled: false), expecting: Done.self) { _ in
            router.setRegisteredForNotifications(false)
        }
    }

    /// Opens a session with `accessory` for `protocol`, which the app's manifest
    /// must declare. Only one session per accessory and protocol exists at a
    /// time: another holder's gets an error that names it.
    ///
    /// - Parameters:
    ///   - lineSettings: overrides the accessory's, e.g. `"9600 8N1"`, `"115200 8N1 rtscts"`.
    ///   - reopen: when the accessory goes away, keep the session waiting for
    ///     the same accessory (USB ids and serial number) and reopen it when it
    ///     returns (`.interrupted`, then `.reopened`), instead of closing it.
    public func openSession(
        to accessory: AccessoryInfo, protocol: String, lineSettings: String? = nil, reopen: Bool = false
    ) async throws -> AccessorySession {
        let (stream, continuation) = AsyncStream.makeStream(of: Delivery<AccessorySession.Event>.self)
        let status = AccessorySession.Status(accessory: accessory)
        let sink = EventRouter.SessionSink(continuation: continuation, status: status)
        let request = OpenSession(
            connectionID: accessory.connectionID, protocol: `protocol`, lineSettings: lineSettings, reopen: reopen ? true : nil)
        let (session, router) = (self.session, self.session.router)
        // The session is registered as its reply is read, before its first event
        // can be. Unstructured, so a cancelled caller cannot leave the daemon
        // with a session this process does not know.
        let opening = Task {
            try await session.request(request, expecting: SessionOpened.self) { reply in
                guard let opened = try? reply.decode(SessionOpened.self) else { return }
                status.opened(opened.accessory)
                router.register(session: opened.session, sink)
            }
        }
        do {
            let opened = try await opening.value
            return AccessorySession(id: opened.session, protocol: `protocol`, status: status, stream: stream, session: session)
        } catch {
            continuation.finish()
            throw error
        }
    }
}

/// An accessory came or went.
public enum AccessoryNotification: Sendable, Equatable {
    case connected(AccessoryInfo)
    case disconnected(AccessoryInfo)

    public var accessory: AccessoryInfo {
        switch self {
        case let .connected(accessory), let .disconnected(accessory): accessory
        }
    }
}

extension AppEvent {
    /// The typed content of an accessory event (`accessory.*`, `session.*`), nil
    /// for other kinds: for the accessory events that arrive in
    /// `Application.events`, such as data a crashed process had not finished.
    public var accessoryContent: AccessoryEventContent? {
        (try? AccessoryEventContent(kind: kind, attributes: attributes)) ?? nil
    }
}
