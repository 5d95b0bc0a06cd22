import VigilProtocol

/// Registers a Bluetooth manager (`CentralManager`, `PeripheralManager`) with
/// the daemon and returns its acknowledging event stream.
///
/// `route` installs the manager's sink with the router as the registration's
/// reply is read, on the reader thread, so no later event of the manager can
/// arrive before it. The request runs unstructured, so a cancelled caller
/// cannot leave the daemon with a manager this process does not route to.
/// `unroute` runs when the stream ends (the manager released, or the
/// iterating task cancelled).
func registerManager<Event: Sendable, Reply: Message>(
    _ request: some Message, expecting _: Reply.Type, on session: ApplicationSession,
    route: @escaping @Sendable (Reply, AsyncStream<Delivery<Event>>.Continuation) -> Void,
    unroute: @escaping @Sendable () -> Void
) async throws -> AsyncStream<Event> {
    let (stream, continuation) = AsyncStream.makeStream(of: Delivery<Event>.self)
    let registering = Task {
        try await session.request(request, expecting: Reply.self) { reply in
            guard let registered = try? reply.decode(Reply.self) else { return }
            route(registered, continuation)
        }
    }
    do {
        _ = try await registering.value
    } catch {
        continuation.finish()
        throw error
    }
    continuation.onTermination = { _ in unroute() }
    let feed = DeliveryFeed(stream)
    return AsyncStream(unfolding: { await feed.next() })
}

/// Feeds `CentralManager.events` (and `PeripheralManager.events`) one delivery
/// at a time: `AsyncStream(unfolding:)` asks for the next only when the
/// consumer does, which is when it is done with the previous one, whose token
/// is then finished. Only one consumer calls `next`, one call at a time
/// (`AsyncStream`'s own contract), hence `@unchecked`.
final class DeliveryFeed<Element: Sendable>: @unchecked Sendable {
    private var iterator: AsyncStream<Delivery<Element>>.AsyncIterator
    private var current: AcknowledgementToken?

    init(_ stream: AsyncStream<Delivery<Element>>) {
        iterator = stream.makeAsyncIterator()
    }

    func next() async -> Element? {
        current?.finish()
        current = nil
        guard let delivery = await iterator.next() else { return nil }
        current = delivery.token
        return delivery.element
    }

    deinit { current?.finish() }
}
