import Glibc
import Testing
import VigilDBus
import VigilSystem

/// python3-dbus (another implementation) calls into Swift-exported objects,
/// so our wire format is checked by something other than libdbus-from-Swift.
@Suite(.timeLimit(.minutes(1)))
struct PythonInteropTests {
    static let script = #"""
    import sys, dbus
    bus = dbus.bus.BusConnection(sys.argv[1])
    dest = sys.argv[2]
    echo = dbus.Interface(bus.get_object(dest, '/echo', introspect=False), 'org.vigil.Test')
    sent = (dbus.Byte(7), True, dbus.Int16(-3), dbus.UInt16(65535), dbus.Int32(-100000),
            dbus.UInt32(4000000000), dbus.Int64(-2**40), dbus.UInt64(2**63), 1.5, 'héllo',
            dbus.ObjectPath('/a/b'), dbus.Signature('a{sv}'), dbus.ByteArray(b'\x00\x01\xff'),
            {'k': dbus.UInt32(1)}, (1, 'x'), dbus.Array([], signature='s'))
    reply = echo.Echo(*sent, signature='ybnqiuxtdsogaya{sv}(is)as', byte_arrays=True)
    expected = [7, True, -3, 65535, -100000, 4000000000, -2**40, 2**63, 1.5, 'héllo', '/a/b', 'a{sv}',
                b'\x00\x01\xff', {'k': 1}, (1, 'x'), []]
    assert len(reply) == len(expected), reply
    for got, want in zip(reply, expected):
        assert got == want, (got, want)
    assert isinstance(reply[0], dbus.Byte) and isinstance(reply[10], dbus.ObjectPath), reply
    assert reply[15].signature == 's', reply[15].signature
    try:
        echo.Fail()
        raise SystemExit('Fail did not raise')
    except dbus.exceptions.DBusException as e:
        assert e.get_dbus_name() == 'org.vigil.Test.Error.Boom', e.get_dbus_name()
    manager = dbus.Interface(bus.get_object(dest, '/app', introspect=False), 'org.freedesktop.DBus.ObjectManager')
    objects = manager.GetManagedObjects(byte_arrays=True)
    char = objects['/app/service0/char0']['org.bluez.GattCharacteristic1']
    assert char['UUID'] == '2a37' and list(char['Flags']) == ['read', 'notify'], char
    props = dbus.Interface(bus.get_object(dest, '/app/service0/char0', introspect=False), 'org.freedesktop.DBus.Properties')
    assert props.Get('org.bluez.GattCharacteristic1', 'UUID') == '2a37'
    props.Set('org.bluez.GattCharacteristic1', 'Value', dbus.ByteArray(b'\x05'), signature='ssv')
    print('ok')
    """#

    @Test(.enabled(if: access("/usr/bin/python3", X_OK) == 0))
    func python3DBusCallsSwiftObjects() async throws {
        try await withConnections { bus, server, _ in
            let held = try await Echo.export(on: server)
            let tree = try await ObjectTreeTests.makeTree(on: server)
            try write(Self.script, to: bus.directory + "/client.py")
            let name = try #require(await server.uniqueName)
            let (status, output) = try await Self.run(
                ["/usr/bin/python3", bus.directory + "/client.py", bus.address, name], outputTo: bus.directory + "/client.out")
            #expect(status == .exited(0), "python3 said: \(output)")
            #expect(output.contains("ok"))
            // What Swift received from python: the types python was told to send.
            #expect(held.received.snapshot.first == "Echo")
            #expect(await tree.property(ObjectTreeTests.characteristic, interface: ObjectTreeTests.gatt, name: "Value")
                == .bytes([5]))
        }
    }

    /// Runs a process to completion off the loop (the loop must keep serving
    /// the calls it makes), killing it after 20 s.
    static func run(_ arguments: [String], outputTo path: String) async throws -> (ProcessStatus?, String) {
        let output = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard output >= 0 else { throw TestFailure("open \(path)") }
        defer { close(output) }
        var environment = SpawnRequest.currentEnvironment()
        environment["PYTHONDONTWRITEBYTECODE"] = "1"
        let process = try ProcessSpawner.spawn(SpawnRequest(
            executable: arguments[0], arguments: Array(arguments.dropFirst()), environment: environment, output: output))
        defer { close(process.pidfd) }
        let deadline = MonotonicInstant.now().advanced(by: .seconds(20))
        while MonotonicInstant.now() < deadline {
            if let status = try ProcessControl.reap(process) { return (status, read(path)) }
            try await Task.sleep(for: .milliseconds(20))
        }
        try? ProcessControl.sendSignal(SIGKILL, toPidfd: process.pidfd)
        var request = pollfd(fd: process.pidfd, events: Int16(POLLIN), revents: 0)
        _ = poll(&request, 1, 5000)
        _ = try? ProcessControl.reap(process)
        return (nil, read(path))
    }
}
