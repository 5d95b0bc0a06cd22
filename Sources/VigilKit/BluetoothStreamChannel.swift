import VigilProtocol
import VigilSystem

/// What an L2CAP channel and an RFCOMM channel are alike in: a byte stream
/// vigild holds for the app, carried as an accessory session's bytes are
/// (`stream`). `L2CAPChannel` and `RFCOMMChannel` add what names their end
/// (PSM and MTUs, or the server channel).
public protocol BluetoothStreamChannel: Sendable {
    /// The stream underneath: `incoming`, `write`, `close` are its own.
    var stream: AccessorySession { get }
    /// The device at the other end.
    var peer: String { get }
}

extension BluetoothStreamChannel {
    /// Why the channel ended; nil while it is open (or waiting to reopen).
    public var closeReason: String? { stream.closeReason }

    /// Data, interruptions and the end (`.closed`), in order; see `AccessorySession.incoming`.
    public var incoming: AcknowledgingStream<AccessorySession.Event> { stream.incoming }
    /// Only the bytes; finishes when the channel ends.
    public var bytes: AccessorySession.Bytes { stream.bytes }

    /// Writes `bytes` and returns once vigild has handed them all to the kernel
    /// (which sends as the peer's credits allow).
    public func write(_ bytes: [UInt8]) async throws { try await stream.write(bytes) }

    public func close() async { await stream.close() }
}

/// Stands in for the accessory of the session a channel is.
func channelAccessory(_ name: String) -> AccessoryInfo {
    AccessoryInfo(
        connectionID: 0, name: name, manufacturer: "", modelNumber: "", serialNumber: "", firmwareRevision: "",
        hardwareRevision: "", protocolStrings: [], deviceNode: "", vendorID: "", productID: "", sysPath: "", lineSettings: "")
}

/// A channel's event stream and status, made before its session id is known.
struct ChannelSink {
    let stream: AsyncStream<Delivery<AccessorySession.Event>>
    let continuation: AsyncStream<Delivery<AccessorySession.Event>>.Continuation
    let status: AccessorySession.Status

    init(accessory: AccessoryInfo) {
        (stream, continuation) = AsyncStream.makeStream(of: Delivery<AccessorySession.Event>.self)
        status = AccessorySession.Status(accessory: accessory)
    }

    var routerSink: EventRouter.SessionSink { EventRouter.SessionSink(continuation: continuation, status: status) }
}

extension Application {
    /// Sends a request that opens a channel and returns its session, with the
    /// reply. The session is registered with the router as the reply is
    /// read, before its first data can be (see `openSession`).
    func openChannel<Reply: Message>(
        _ request: some Message, expecting _: Reply.Type, accessory: AccessoryInfo, session sessionOf: @escaping @Sendable (Reply) -> Int,
        protocol name: @escaping @Sendable (Reply) -> String
    ) async throws -> (Reply, AccessorySession) {
        let sink = ChannelSink(accessory: accessory)
        let routerSink = sink.routerSink
        let (session, router) = (self.session, self.session.router)
        let opening = Task {
            try await session.request(request, expecting: Reply.self) { reply in
                guard let opened = try? reply.decode(Reply.self) else { return }
                router.register(session: sessionOf(opened), routerSink)
            }
        }
        do {
            let reply = try await opening.value
            let stream = AccessorySession(id: sessionOf(reply), protocol: name(reply), status: sink.status, stream: sink.stream, session: session)
            return (reply, stream)
        } catch {
            sink.continuation.finish()
            throw error
        }
    }
}

/// A channel a remote device opened (to a published PSM or serial service),
/// registered with the router when its event was read.
struct PendingChannel: Sendable {
    var stream: AsyncStream<Delivery<AccessorySession.Event>>
    var status: AccessorySession.Status
}

extension EventRouter {
    /// Called for each event before it is routed: an incoming channel's event
    /// (`ble.l2cap.incoming`, `bluetooth.rfcomm.incoming`) registers its
    /// session at once, so data that follows is held for the channel the app
    /// makes of the event.
    func noteIncomingChannel(_ event: AppEvent) {
        guard !event.redelivered else { return }
        let session: Int
        let accessory: AccessoryInfo
        switch event.kind {
        case L2CAPEventKind.incoming:
            guard let info = L2CAPChannelInfo(attributes: event.attributes) else { return }
            (session, accessory) = (info.session, L2CAPChannel.noAccessory)
        case RFCOMMEventKind.incoming:
            guard let info = RFCOMMChannelInfo(attributes: event.attributes) else { return }
            (session, accessory) = (info.session, RFCOMMChannel.noAccessory)
        default:
            return
        }
        let sink = ChannelSink(accessory: accessory)
        register(session: session, sink.routerSink)
        incomingChannels.withLock { $0[session] = PendingChannel(stream: sink.stream, status: sink.status) }
    }

    func takeIncomingChannel(_ session: Int) -> PendingChannel? {
        incomingChannels.withLock { $0.removeValue(forKey: session) }
    }
}

extension Application {
    /// The session of an incoming channel whose event was read; nil if it was taken already.
    func incomingChannelSession(_ id: Int, protocol name: String) -> AccessorySession? {
        guard let pending = session.router.takeIncomingChannel(id) else { return nil }
        return AccessorySession(id: id, protocol: name, status: pending.status, stream: pending.stream, session: session)
    }
}
