import VigilProtocol

/// What a connection hands to its owner, in the order the daemon sent it.
enum ConnectionEvent: Sendable {
    /// The handshake succeeded; delivered before any later message.
    case welcome(Welcome)
    /// A frame that answers no pending request: events, lifecycle, notices.
    case message(IncomingMessage)
    /// The connection is gone, for this reason; nothing follows.
    case closed(ProtocolError)
}
