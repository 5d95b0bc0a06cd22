import Testing
import VigilSystem

/// An actor that lives on an event loop, as the daemon's engine does.
private actor LoopBound {
    let loop: EventLoop
    var count = 0

    init(loop: EventLoop) {
        self.loop = loop
    }

    nonisolated var unownedExecutor: UnownedSerialExecutor {
        loop.asUnownedSerialExecutor()
    }

    func increment() -> (count: Int, onLoop: Bool) {
        count += 1
        return (count, loop.isInLoopThread)
    }
}

@Suite struct EventLoopExecutorTests {
    @Test func actorMethodsRunOnTheLoopThread() async throws {
        try await withRunningLoop { loop in
            let actor = LoopBound(loop: loop)
            let result = await Task.detached { await actor.increment() }.value
            #expect(result.onLoop)
            #expect(result.count == 1)
            #expect(await actor.increment().count == 2)
        }
    }

    @Test func handlersCanAssumeTheActorsIsolation() async throws {
        try await withRunningLoop { loop in
            let actor = LoopBound(loop: loop)
            let (reader, writer) = try UnixStream.pair()
            let counts = Recorder<Int>()
            let watch = try loop.watch(reader.fd, for: .readable) { _ in
                _ = try? reader.read(maxBytes: 1)
                // Synchronous entry: no hop, no await, because we are on the loop.
                counts.append(actor.assumeIsolated { actor in
                    actor.count += 10
                    return actor.count
                })
            }
            loop.schedule(after: .milliseconds(1)) {
                counts.append(actor.assumeIsolated { actor in
                    actor.count += 100
                    return actor.count
                })
            }
            try writer.writeAll([1])
            let seen = await counts.wait(forCount: 2)
            #expect(Set(seen) == [10, 110] || Set(seen) == [100, 110])
            #expect(await actor.increment() == (count: 111, onLoop: true))
            loop.removeWatch(watch)
        }
    }
}
