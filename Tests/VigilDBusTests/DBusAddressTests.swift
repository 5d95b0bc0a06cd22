import Testing
import VigilDBus

@Suite struct DBusAddressTests {
    @Test func socketPathsOfUnixPathEntries() {
        #expect(DBusAddress.socketPaths("unix:path=/run/dbus/system_bus_socket") == ["/run/dbus/system_bus_socket"])
        #expect(DBusAddress.socketPaths("unix:guid=0123,path=/tmp/a%20b;tcp:host=localhost,port=1;unix:path=/c")
            == ["/tmp/a b", "/c"])
        #expect(DBusAddress.socketPaths("unix:abstract=/tmp/dbus-x").isEmpty)
        #expect(DBusAddress.socketPaths("tcp:host=localhost,port=1").isEmpty)
        #expect(DBusAddress.socketPaths("unix:path=/bad%2").isEmpty)
    }
}
