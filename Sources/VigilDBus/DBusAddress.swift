import Glibc

/// D-Bus server addresses ("unix:path=/run/dbus/system_bus_socket", several
/// separated by ';'), as far as a client needs to know where to wait.
public enum DBusAddress {
    /// The system bus's address: DBUS_SYSTEM_BUS_ADDRESS if set, else the
    /// well-known socket.
    public static var system: String {
        environment("DBUS_SYSTEM_BUS_ADDRESS") ?? "unix:path=/run/dbus/system_bus_socket"
    }

    /// The socket files of the address's `unix:path=` entries, unescaped. A
    /// client that cannot connect can wait for one of them to appear; other
    /// transports (abstract sockets, tcp) have no file to wait for.
    public static func socketPaths(_ address: String) -> [String] {
        address.split(separator: ";").compactMap { entry -> String? in
            guard let colon = entry.firstIndex(of: ":"), entry[..<colon] == "unix" else { return nil }
            for pair in entry[entry.index(after: colon)...].split(separator: ",") {
                let parts = pair.split(separator: "=", maxSplits: 1)
                if parts.count == 2 && parts[0] == "path" { return unescape(parts[1]) }
            }
            return nil
        }
    }

    /// Undoes the address format's %XX escapes.
    static func unescape(_ value: Substring) -> String? {
        var bytes: [UInt8] = []
        var iterator = Array(value.utf8).makeIterator()
        while let byte = iterator.next() {
            guard byte == UInt8(ascii: "%") else {
                bytes.append(byte)
                continue
            }
            guard let high = iterator.next(), let low = iterator.next(),
                  let value = UInt8(String(decoding: [high, low], as: UTF8.self), radix: 16) else { return nil }
            bytes.append(value)
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    static func environment(_ name: String) -> String? {
        getenv(name).map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 }
    }
}
