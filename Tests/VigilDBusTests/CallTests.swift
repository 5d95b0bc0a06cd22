import Glibc
import Testing
import VigilDBus
import VigilSystem

@Suite(.timeLimit(.minutes(1)))
struct CallTests {
    /// Every type, through a real bus and back (libdbus encodes, the daemon
    /// validates and routes, libdbus decodes).
    @Test func everyValueTypeRoundTrips() async throws {
        try await withConnections { _, server, client in
            try await Echo.export(on: server)
            let values: [DBusValue] = [
                .byte(0xFE), .bool(true), .bool(false), .int16(-32768), .uint16(65535),
                .int32(Int32.min), .uint32(UInt32.max), .int64(Int64.min), .uint64(UInt64.max),
                .double(-1.25), .string(""), .string("héllo wörld ✓"), .objectPath("/org/bluez/hci0"),
                .signature("a{sv}"),
                .bytes([0, 1, 2, 255]), .bytes([]),
                .array(elementSignature: "s", []), .array(elementSignature: "a{sv}", []),
                .array(elementSignature: "(is)", [.struct([.int32(1), .string("a")]), .struct([.int32(2), .string("b")])]),
                .stringVariantDictionary([:]),
                .stringVariantDictionary(["Name": .string("x"), "RSSI": .int16(-60), "UUIDs": .strings(["180d"]),
                                          "Data": .bytes([1, 2])]),
                .dictionary(keySignature: "o", valueSignature: "u",
                            [DBusDictEntry(key: .objectPath("/a"), value: .uint32(1))]),
                .dictionary(keySignature: "q", valueSignature: "v",
                            [DBusDictEntry(key: .uint16(0x004C), value: .variant(.bytes([9, 9])))]),
                .struct([.byte(1), .array(elementSignature: "ay", [.bytes([1]), .bytes([])]), .variant(.bool(true))]),
                .variant(.variant(.variant(.stringVariantDictionary(["k": .uint64(7)])))),
                .variant(.array(elementSignature: "s", [])),
            ]
            let echoed = try await client.callEcho(server, "Echo", values)
            #expect(echoed == values)
            #expect(echoed.dbusSignature == values.dbusSignature)
            #expect(echoed[14].bytes == [0, 1, 2, 255])
            #expect(echoed[20].dictionaryStringVariant?["RSSI"] == .int16(-60))
        }
    }

    @Test func errorReplyIsThrownWithItsName() async throws {
        try await withConnections { _, server, client in
            try await Echo.export(on: server)
            let error = await errorOf { _ = try await client.callEcho(server, "Fail") }
            #expect(error as? DBusError == DBusError(name: "org.vigil.Test.Error.Boom", message: "boom"))
        }
    }

    @Test func unknownMethodAndObjectGetStandardErrors() async throws {
        try await withConnections { _, server, client in
            try await Echo.export(on: server)
            let unknownMethod = await errorOf { _ = try await client.callEcho(server, "Nope") }
            #expect((unknownMethod as? DBusError)?.name == DBusError.Name.unknownMethod)
            let unknownObject = await errorOf {
                _ = try await client.call(destination: await server.uniqueName, path: "/nothing/here",
                                          interface: Echo.interface, member: "Echo")
            }
            #expect((unknownObject as? DBusError)?.name == DBusError.Name.unknownObject)
            let noService = await errorOf {
                _ = try await client.call(destination: "org.vigil.Absent", path: "/", interface: nil, member: "X")
            }
            #expect((noService as? DBusError)?.name == DBusError.Name.serviceUnknown)
        }
    }

    @Test func callTimesOutWithNoReply() async throws {
        try await withConnections { _, server, client in
            let held = try await Echo.export(on: server)
            let started = MonotonicInstant.now()
            let error = await errorOf {
                _ = try await client.callEcho(server, "Never", timeout: .milliseconds(300))
            }
            #expect((error as? DBusError)?.name == DBusError.Name.noReply)
            #expect(MonotonicInstant.now() - started < .seconds(5))
            #expect(held.calls.withLock { $0.count } == 1)
        }
    }

    /// The handler answers after an await; meanwhile the loop serves other calls.
    @Test func deferredReplyDoesNotBlockTheLoop() async throws {
        try await withConnections { _, server, client in
            let held = try await Echo.export(on: server)
            let slowDone = Recorder<String>()
            let slow = Task {
                let reply = try await client.callEcho(server, "Slow", [.uint32(1500)])
                slowDone.append(reply.first?.string ?? "")
            }
            // The slow call is now pending in the server's handler.
            #expect(await held.received.wait(forCount: 1).count == 1)
            let fast = try await client.callEcho(server, "Echo", [.string("fast")])
            #expect(fast == [.string("fast")])
            #expect(slowDone.snapshot.isEmpty, "the fast call was answered while the slow one was pending")
            try await slow.value
            #expect(slowDone.snapshot == ["slow done"])
        }
    }

    @Test func droppedCallIsAnsweredAndReported() async throws {
        try await withConnections { _, server, client in
            try await Echo.export(on: server)
            let dropped = Recorder<String>()
            await server.onUnansweredCall { message in dropped.append(message.member ?? "") }
            let error = await errorOf { _ = try await client.callEcho(server, "Drop") }
            #expect((error as? DBusError)?.name == DBusError.Name.failed)
            #expect(await dropped.wait(forCount: 1) == ["Drop"])
        }
    }

    @Test func cancellingTheTaskEndsTheCall() async throws {
        try await withConnections { _, server, client in
            try await Echo.export(on: server)
            let task = Task { try await client.callEcho(server, "Never", timeout: .seconds(20)) }
            try await Task.sleep(for: .milliseconds(100))
            task.cancel()
            let error = try await withTimeout(.seconds(5)) { await errorOf { _ = try await task.value } }
            #expect(error is CancellationError)
        }
    }

    @Test func wellKnownNamesCanBeOwnedAndCalled() async throws {
        try await withConnections { _, server, client in
            try await Echo.export(on: server)
            #expect(try await server.requestName("org.vigil.Echo") == .primaryOwner)
            #expect(try await server.requestName("org.vigil.Echo") == .alreadyOwner)
            #expect(try await client.requestName("org.vigil.Echo") == .exists)
            let reply = try await client.call(destination: "org.vigil.Echo", path: Echo.path,
                                              interface: Echo.interface, member: "Echo", arguments: [.uint32(5)])
            #expect(reply == [.uint32(5)])
            #expect(await server.uniqueName?.hasPrefix(":") == true)
        }
    }

    /// Not an assertion: a figure for docs/dbus.md.
    @Test func sequentialCallRate() async throws {
        try await withConnections { _, server, client in
            try await Echo.export(on: server)
            let destination = await server.uniqueName
            let count = 2000
            let started = MonotonicInstant.now()
            for index in 0..<count {
                _ = try await client.call(destination: destination, path: Echo.path, interface: Echo.interface,
                                          member: "Echo", arguments: [.uint32(UInt32(index))])
            }
            let elapsed = MonotonicInstant.now() - started
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            print("VigilDBus: \(count) sequential calls in \(elapsed): \(Int(Double(count) / seconds)) calls/s")
        }
    }
}
