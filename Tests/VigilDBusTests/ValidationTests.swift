import Testing
import VigilDBus
import VigilSystem

/// libdbus aborts the process on invalid names and values; these must be
/// errors instead. That the test process survives is half the check.
@Suite(.timeLimit(.minutes(1)))
struct ValidationTests {
    @Test func invalidObjectPathsAreRejected() {
        for path in ["", "relative", "/trailing/", "//double", "/bad-char", "/a\0b", "/ü"] {
            #expect(throws: DBusError.self) { try ObjectPath(path) }
        }
        let valid = "/org/bluez/hci0/dev_AA_BB"
        #expect((try? ObjectPath(valid))?.rawValue == valid)
        #expect(ObjectPath("/org/bluez/hci0/dev_1").isInside("/org/bluez"))
        #expect(!ObjectPath("/org/bluezz").isInside("/org/bluez"))
    }

    @Test func invalidNamesInCallsThrow() async throws {
        try await withConnections { _, server, client in
            let destination = await server.uniqueName
            let cases: [(String?, String?, String)] = [
                (destination, "no_dots", "Member"),
                (destination, "org..double", "Member"),
                (destination, "org.vigil.Test", "1startsWithDigit"),
                (destination, "org.vigil.Test", "has.dot"),
                (destination, "org.vigil.Test", ""),
                ("bad name!", "org.vigil.Test", "Member"),
                (destination, "org.vigil.Test\0", "Member"),
            ]
            for (destination, interface, member) in cases {
                let error = await errorOf {
                    _ = try await client.call(destination: destination, path: "/x", interface: interface, member: member)
                }
                #expect((error as? DBusError)?.name == DBusError.Name.invalidArgs, "\(interface ?? "") \(member)")
            }
            let signalError = await errorOf { try await client.emitSignal(path: "/x", interface: "bad", member: "Member") }
            #expect((signalError as? DBusError)?.name == DBusError.Name.invalidArgs)
            // The connection still works.
            try await Echo.export(on: server)
            #expect(try await client.callEcho(server, "Echo", [.string("ok")]) == [.string("ok")])
        }
    }

    @Test func invalidValuesThrow() async throws {
        try await withConnections { _, server, client in
            try await Echo.export(on: server)
            let bad: [DBusValue] = [
                .array(elementSignature: "s", [.int32(1)]),
                .array(elementSignature: "{sv}", []),
                .array(elementSignature: "not a type", []),
                .dictionary(keySignature: "v", valueSignature: "s", []),
                .dictionary(keySignature: "s", valueSignature: "v", [DBusDictEntry(key: .string("k"), value: .string("unwrapped"))]),
                .struct([]),
                .string("nul\0inside"),
                .signature("a{"),
            ]
            for value in bad {
                let error = await errorOf { _ = try await client.callEcho(server, "Echo", [value]) }
                #expect((error as? DBusError)?.name == DBusError.Name.invalidArgs, "\(value)")
            }
            #expect(try await client.callEcho(server, "Echo", [.uint32(1)]) == [.uint32(1)])
        }
    }

    @Test func badAddressIsAnError() async throws {
        let loop = try EventLoop(name: "dbus-bad-address")
        loop.start()
        defer {
            loop.stop()
            loop.waitUntilStopped()
        }
        for address in ["nonsense", "unix:path=/nonexistent/vigil-bus"] {
            let error = await errorOf { _ = try await DBusConnection.open(address: address, on: loop) }
            #expect(error is DBusError, "\(address)")
        }
    }
}
