import VigilProtocol

/// The bytes a client (or a daemon, to a client) can put on the socket: split
/// into frames, each header read as an envelope and decoded as every message
/// type of its `type`, as vigild and VigilKit do.
///
/// Beyond "does not crash", it checks what must hold for any input:
/// - splitting the stream in one piece or in small pieces gives the same
///   frames and the same error (the daemon reads whatever `read()` returns);
/// - a frame re-encoded splits back to itself;
/// - a message that decoded re-encodes (no trap in `MessageCodec.frame`) and
///   decodes again to an equal value (the daemon forwards and saves what it decoded);
/// - the hand-written coding of the frequent frames (`HotFrames`) agrees with
///   Foundation's: a header it takes is an object with the same `type` (and
///   `id`) to `JSONDecoder`; a message both decoders take is equal; a hot
///   message re-encodes to the bytes `JSONEncoder` writes.
public enum FramesFuzzer {
    public static func fuzz(_ bytes: [UInt8]) {
        var whole = FrameDecoder()
        whole.append(bytes)
        let (frames, error) = drain(&whole)

        var pieces = FrameDecoder()
        var piecewiseFrames: [Frame] = []
        var piecewiseError: FrameError?
        var offset = 0
        while offset < bytes.count, piecewiseError == nil {
            // Piece sizes 1...17 drawn from the input itself: deterministic, so a crash reproduces.
            let size = min(1 + Int(bytes[offset] % 17), bytes.count - offset)
            pieces.append(bytes[offset..<(offset + size)])
            offset += size
            let (more, error) = drain(&pieces)
            piecewiseFrames += more
            piecewiseError = error
        }
        check(frames == piecewiseFrames, "\(frames.count) frames in one piece, \(piecewiseFrames.count) in pieces")
        check(error == piecewiseError, "error \(String(describing: error)) in one piece, \(String(describing: piecewiseError)) in pieces")
        if error == nil {
            check(whole.pendingByteCount == pieces.pendingByteCount, "pending bytes differ")
        }

        for frame in frames {
            var again = FrameDecoder()
            again.append(frame.encoded())
            check((try? again.next()) == frame, "a re-encoded frame does not split back to itself")
            check(again.pendingByteCount == 0, "a re-encoded frame leaves bytes behind")
            decodeMessages(frame)
        }
    }

    static func drain(_ decoder: inout FrameDecoder) -> ([Frame], FrameError?) {
        var frames: [Frame] = []
        do {
            while let frame = try decoder.next() { frames.append(frame) }
            return (frames, nil)
        } catch {
            _ = error.description
            return (frames, error)
        }
    }

    static func decodeMessages(_ frame: Frame) {
        let message: IncomingMessage
        do {
            message = try IncomingMessage(frame: frame)
        } catch {
            _ = error.description
            return
        }
        guard let generic = MessageCodec.genericEnvelope(frame.header) else {
            fail("a header HeaderReader takes is not an object with a string type to JSONDecoder")
        }
        check(generic.type == message.type, "type \(message.type) here, \(generic.type) to JSONDecoder")
        if let id = generic.id { check(message.id.map(Int64.init) == id, "id \(String(describing: message.id)) here, \(id) to JSONDecoder") }
        for type in byType[message.type] ?? [] {
            roundTrip(message, as: type)
        }
    }

    static func roundTrip<M: Message & Equatable>(_ message: IncomingMessage, as _: M.Type) {
        let decoded: M
        do {
            decoded = try message.decode(M.self)
        } catch {
            _ = error.description
            return
        }
        if let hot: M = try? HotFrames.decode(message), let generic = try? message.genericDecode(M.self) {
            check(hot == generic, "\(M.self) decodes to \(hot) by hand, \(generic) by JSONDecoder")
        }
        let frame = MessageCodec.frame(decoded, id: message.id, body: message.body)
        if let hot = HotFrames.header(decoded, id: message.id) {
            check(hot == MessageCodec.genericHeader(decoded, id: message.id), "\(M.self) encodes by hand unlike JSONEncoder")
        }
        guard let again = try? IncomingMessage(frame: frame) else {
            fail("\(M.self) re-encoded has no readable envelope")
        }
        check(again.type == M.type && again.id == message.id, "\(M.self) re-encoded has type \(again.type), id \(String(describing: again.id))")
        guard let redecoded = try? again.decode(M.self) else {
            fail("\(M.self) re-encoded does not decode")
        }
        check(redecoded == decoded, "\(M.self) changes in a round trip: \(decoded) became \(redecoded)")
    }

    /// Every message type of the protocol, by its `type`: requests the daemon
    /// accepts from apps and control clients, and what clients accept from it.
    static let all: [any (Message & Equatable).Type] = [
        // Handshake and errors
        Hello.self, Welcome.self, Done.self, ProtocolError.self,
        // App role
        Acknowledge.self, BeginBackgroundTask.self, BackgroundTaskGranted.self, EndBackgroundTask.self,
        FinishedProcessing.self, QueryBackgroundTime.self, BackgroundTimeRemaining.self,
        LifecycleMessage.self, EventMessage.self, TaskExpiring.self, DeadlineChanged.self,
        // Control role
        StatusRequest.self, DaemonStatus.self, ListApps.self, AppList.self, AppActionRequest.self, AppReply.self,
        WakeRequest.self, EventAccepted.self, LogRequest.self, DecisionLog.self, ReloadRequest.self, ReloadResult.self,
        // Accessories
        ListAccessories.self, AccessoryList.self, RegisterForAccessoryNotifications.self, OpenSession.self,
        SessionOpened.self, WriteToSession.self, BytesWritten.self, CloseSession.self, SessionData.self,
        SessionClosed.self, WatchAccessories.self, AccessoryEvent.self,
        // Bluetooth LE central
        RegisterCentral.self, CentralRegistered.self, GetBluetoothState.self, BluetoothStateReply.self,
        StartScan.self, StopScan.self, ListPeripherals.self, PeripheralList.self, ConnectPeripheral.self,
        CancelPeripheralConnection.self, DiscoverServices.self, GATTServices.self, ReadCharacteristic.self,
        CharacteristicValue.self, WriteCharacteristic.self, SetNotify.self, BluetoothPush.self,
        StartMonitor.self, StopMonitor.self, ListMonitors.self, MonitorList.self,
        // Bluetooth LE peripheral
        RegisterPeripheral.self, PeripheralRegistered.self, AddService.self, RemoveService.self,
        StartAdvertising.self, StopAdvertising.self, RespondToRequest.self, UpdateValue.self, ValueUpdated.self,
    ]

    static let byType: [String: [any (Message & Equatable).Type]] = Dictionary(grouping: all, by: { $0.type })
}

/// A broken invariant is a crash, so libFuzzer keeps the input.
func check(_ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String) {
    if !condition() { fail(message()) }
}

func fail(_ message: String) -> Never {
    fatalError("FuzzFrames: \(message)")
}
