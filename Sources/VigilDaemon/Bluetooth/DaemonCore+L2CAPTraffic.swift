import VigilAccessories
import VigilL2CAP
import VigilLifecycle
import VigilProtocol
import VigilSystem

/// An L2CAP channel's bytes: SDUs read into the session's log (bounded by
/// it: a full log stops the reading), and the holder's writes cut into SDUs
/// of the channel's send MTU.
///
/// Back-pressure: while vigild does not read, the kernel's receive queue
/// fills, and a kernel that computes LE credits from the room in it (Linux
/// 6.10, backported to Debian 12's 6.1.0-56 used by the lab:
/// `l2cap_chan_rx_avail`) stops giving the peer credits: the peer waits,
/// nothing is lost. Older kernels give credits back regardless and drop SDUs
/// that find the queue full. The socket's SO_RXQ_OVFL counter counts both
/// (a held-back SDU counts too), so it cannot tell loss from back-pressure:
/// vigild logs it, and the lab test checks the bytes end to end.
extension DaemonCore {
    func channelReady(_ session: Int, _ events: IOEvents) {
        guard let channel = l2capState.channels[session] else { return }
        if channel.opening != nil { return finishOpening(session, channel) }
        if events.contains(.writable) { flushChannelWrites(session, channel) }
        guard l2capState.channels[session] === channel else { return }  // a failed write ended it
        if channel.readingPaused, events.contains(.hangup) || events.contains(.error) {
            // Closed while the app's buffer is full: what the kernel still
            // holds stays readable. Stop watching (a hang-up is reported
            // whatever the mask) until there is room, then read the rest.
            if let watch = channel.watch { loop.removeWatch(watch) }
            channel.watch = nil
            return
        }
        if events.contains(.readable) || events.contains(.hangup) || events.contains(.error) {
            readChannel(session, channel)
        }
    }

    /// Reads SDUs into the session's log while the holder has room, up to 16
    /// per readiness (level-triggered epoll calls again).
    func readChannel(_ session: Int, _ channel: OpenChannel) {
        guard let record = accessoryState.sessions.sessions[session], let open = accessoryState.logs[session] else { return }
        if case let .app(app) = record.holder, !canBufferChannel(session, app: app) { return pauseChannel(session, channel) }
        for round in 0..<16 {
            if !channel.held.isEmpty {
                let stored = channel.held.withUnsafeBytes { store($0, in: open.log) }
                channel.held = channel.held.dropFirst(stored)
                if !channel.held.isEmpty {
                    announce(session)
                    return pauseChannel(session, channel)
                }
            }
            let outcome: L2CAPReceive
            do {
                outcome = try channel.scratch.withUnsafeMutableBytes { buffer throws(L2CAPError) in try channel.socket.receive(into: buffer) }
            } catch {
                announce(session)
                return endChannel(session, reason: "read failed: \(error)")
            }
            switch outcome {
            case .wouldBlock:
                announce(session)
                return
            case .closed:
                return endChannel(session, reason: "the channel was closed (by the peer, or its link went)")
            case let .sdu(count, truncated, dropCounter):
                channel.bytesIn += UInt64(count)
                if truncated {
                    logger.error("l2cap: session \(session): an SDU longer than the receive MTU \(channel.receiveMTU) was cut")
                }
                if let dropCounter, dropCounter != channel.dropCounter {
                    reportDrops(session, channel, record, dropped: dropCounter &- channel.dropCounter)
                    channel.dropCounter = dropCounter
                }
                let stored = channel.scratch.withUnsafeBytes { store(UnsafeRawBufferPointer(rebasing: $0[0..<count]), in: open.log) }
                if stored < count { channel.held = channel.scratch[stored..<count] }
                // The first read is announced at once: a suspended app's wake
                // overlaps the reads that follow (as for serial sessions).
                if round == 0 { announce(session) }
            }
        }
        announce(session)
    }

    /// How long a streaming channel's bytes may wait to share a
    /// `session.data` event unless its opener chose (`coalesceMilliseconds`;
    /// see `holdsAnnouncement`). An LE link brings an SDU every few
    /// milliseconds, and an awake app acknowledged each event before the next
    /// came: one event per SDU, ~400 per MiB, whose cost (queue, journal,
    /// wake, the app's handling) was 30 times the direct reader's CPU per
    /// byte. A lone SDU after a quiet spell goes at once.
    static let channelAnnounceWindow: Duration = .milliseconds(L2CAPCoalescing.defaultMilliseconds)

    /// A request's `coalesceMilliseconds` as a window (nil: the default).
    /// Capped at a second: beyond that the wait only adds latency, as a
    /// window's bytes go out anyway once they fill a quarter of the buffer.
    func channelCoalescing(_ milliseconds: Int?) throws(ProtocolError) -> Duration {
        guard let milliseconds else { return Self.channelAnnounceWindow }
        let range = L2CAPCoalescing.milliseconds
        guard range.contains(milliseconds) else {
            throw ProtocolError(.invalidArgument, "coalesceMilliseconds \(milliseconds) is outside \(range.lowerBound)-\(range.upperBound) (0: announce every read at once)")
        }
        return .milliseconds(milliseconds)
    }

    /// The window a session's announcements share, if any: channels only,
    /// and not those opened with `coalesceMilliseconds: 0`. Serial sessions
    /// read a pty or UART in large reads and keep announcing at once
    /// (docs/performance.md).
    func announceCoalescing(_ session: Int) -> Duration? {
        guard let window = l2capState.channels[session]?.request.coalesce, window > .zero else { return nil }
        return window
    }

    /// Copies `bytes` into the log's free space (two pieces where the ring
    /// wraps); returns how many fitted.
    private func store(_ bytes: UnsafeRawBufferPointer, in log: SessionLog) -> Int {
        var stored = 0
        while stored < bytes.count {
            let count = log.fill { target in
                let count = min(target.count, bytes.count - stored)
                target.baseAddress!.copyMemory(from: bytes.baseAddress! + stored, byteCount: count)
                return count
            } ?? 0
            if count == 0 { break }
            stored += count
        }
        return stored
    }

    private func canBufferChannel(_ session: Int, app: String) -> Bool {
        guard let record = engine.apps[app], !record.queue.isFull else { return false }
        return accessoryState.logs[session].map { !$0.log.isFull } ?? false
    }

    private func pauseChannel(_ session: Int, _ channel: OpenChannel) {
        guard !channel.readingPaused else { return }
        channel.readingPaused = true
        updateChannelWatch(session, channel)
        logger.info("l2cap: session \(session): buffer full (\(bufferedBytes(session)) bytes unacknowledged); reading paused")
    }

    /// After an app acknowledged: its paused channels read again.
    func resumeChannels(for app: String) {
        for (session, channel) in l2capState.channels where channel.readingPaused && channel.request.client == .app(app) {
            guard canBufferChannel(session, app: app) else { continue }
            channel.readingPaused = false
            updateChannelWatch(session, channel)
            readChannel(session, channel)
        }
    }

    func channelReadingPaused(_ session: Int) -> Bool {
        l2capState.channels[session]?.readingPaused ?? false
    }

    /// Watches for what the channel waits for; no watch at all when it waits
    /// for nothing (epoll would report a hang-up over and over).
    func updateChannelWatch(_ session: Int, _ channel: OpenChannel) {
        var events: IOEvents = channel.readingPaused ? [] : .readable
        if channel.wantsWritable { events.insert(.writable) }
        if events.isEmpty {
            if let watch = channel.watch { loop.removeWatch(watch) }
            channel.watch = nil
        } else if let watch = channel.watch {
            try? loop.updateWatch(watch, for: events)
        } else {
            channel.watch = try? loop.watch(channel.socket.fd, for: events) { [unowned self] events in
                self.assumeIsolated { $0.channelReady(session, events) }
            }
        }
    }

    private func reportDrops(_ session: Int, _ channel: OpenChannel, _ record: SessionRecord, dropped: UInt32) {
        logger.info("l2cap: session \(session): the kernel's receive queue was full \(dropped) more time(s) (SO_RXQ_OVFL); with LE credit back-pressure those SDUs wait in the kernel, without it they are lost")
    }

    // MARK: Writing

    /// `write` on a channel: queued, sent as SDUs of at most the send
    /// MTU as the channel's credits allow, answered once all are sent.
    func writeChannel(_ bytes: [UInt8], session: Int, requestID: Int?, from connection: ClientConnection) throws(ProtocolError) {
        guard let channel = l2capState.channels[session], channel.opening == nil else {
            throw ProtocolError(.invalidState, "channel (session \(session)) is not open (waiting for its link to return)")
        }
        if bytes.isEmpty {
            send(BytesWritten(written: 0), id: requestID, to: connection)
            return
        }
        channel.pendingWrites.append(OpenPort.PendingWrite(requestID: requestID, clientConnection: connection.id, bytes: bytes))
        flushChannelWrites(session, channel)
    }

    private func flushChannelWrites(_ session: Int, _ channel: OpenChannel) {
        while var write = channel.pendingWrites.first {
            let count = min(max(channel.sendMTU, 23), write.bytes.count - write.offset)
            let sent: Int?
            do {
                sent = try write.bytes[write.offset..<write.offset + count].withUnsafeBytes { sdu throws(L2CAPError) in try channel.socket.send(sdu) }
            } catch {
                return endChannel(session, reason: "write failed: \(error)")
            }
            guard let sent else { break }
            write.offset += sent
            channel.bytesOut += UInt64(sent)
            if write.offset < write.bytes.count {
                channel.pendingWrites[0] = write
                continue
            }
            channel.pendingWrites.removeFirst()
            if let id = write.requestID, let connection = connections[write.clientConnection] {
                send(BytesWritten(written: write.bytes.count), id: id, to: connection)
            }
        }
        let wanted = !channel.pendingWrites.isEmpty
        guard wanted != channel.wantsWritable else { return }
        channel.wantsWritable = wanted
        updateChannelWatch(session, channel)
    }
}
