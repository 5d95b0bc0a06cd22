import Testing
import VigilDBus
import VigilSystem

@Suite(.timeLimit(.minutes(1)))
struct DisconnectTests {
    /// Killing the bus fails the call in flight at once (not after its 20 s
    /// timeout) and tells both connections.
    @Test func busGoingAwayFailsCallsAndNotifies() async throws {
        try await withConnections { bus, server, client in
            let held = try await Echo.export(on: server)
            let lost = Recorder<String>()
            await client.onDisconnect { lost.append("client: \($0.name)") }
            await server.onDisconnect { lost.append("server: \($0.name)") }
            let pending = Task { await errorOf { _ = try await client.callEcho(server, "Never", timeout: .seconds(20)) } }
            #expect(await held.received.wait(forCount: 1) == ["Never"])
            let started = MonotonicInstant.now()
            bus.kill()
            let error = try await withTimeout(.seconds(5)) { await pending.value }
            #expect((error as? DBusError)?.name == DBusError.Name.disconnected)
            #expect(MonotonicInstant.now() - started < .seconds(5))
            #expect(Set(await lost.wait(forCount: 2)) == [
                "client: \(DBusError.Name.disconnected)", "server: \(DBusError.Name.disconnected)",
            ])
            #expect(await client.isConnected == false)
            // Later calls fail at once; a late handler is told at once.
            let later = await errorOf { _ = try await client.callEcho(server, "Echo") }
            #expect((later as? DBusError)?.name == DBusError.Name.disconnected)
            await client.onDisconnect { _ in lost.append("late") }
            #expect(lost.snapshot.contains("late"))
        }
    }

    @Test func closeFailsPendingCalls() async throws {
        try await withConnections { _, server, client in
            try await Echo.export(on: server)
            let pending = Task { await errorOf { _ = try await client.callEcho(server, "Never", timeout: .seconds(20)) } }
            try await Task.sleep(for: .milliseconds(100))
            await client.close()
            let error = try await withTimeout(.seconds(5)) { await pending.value }
            #expect((error as? DBusError)?.name == DBusError.Name.disconnected)
        }
    }
}
