/// Minimal introspection XML: enough for `busctl`, `gdbus introspect` and
/// d-feet to walk the tree (standard interfaces, properties, child nodes).
/// Methods handled by per-object handlers are not declared: the tree does
/// not know them.
extension DBusObjectTree {
    func introspection(of path: ObjectPath) -> String {
        var xml = """
        <!DOCTYPE node PUBLIC "-//freedesktop//DTD D-BUS Object Introspection 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd">
        <node>
          <interface name="org.freedesktop.DBus.Introspectable">
            <method name="Introspect"><arg name="xml" type="s" direction="out"/></method>
          </interface>

        """
        if path == root {
            xml += """
              <interface name="org.freedesktop.DBus.ObjectManager">
                <method name="GetManagedObjects"><arg name="objects" type="a{oa{sa{sv}}}" direction="out"/></method>
                <signal name="InterfacesAdded"><arg name="object" type="o"/><arg name="interfaces" type="a{sa{sv}}"/></signal>
                <signal name="InterfacesRemoved"><arg name="object" type="o"/><arg name="interfaces" type="as"/></signal>
              </interface>

            """
        }
        if let object = objects[path] {
            xml += Self.propertiesInterface
            let access = object.setter == nil ? "read" : "readwrite"
            for interface in object.interfaces.keys.sorted() {
                xml += "  <interface name=\"\(escaped(interface))\">\n"
                let properties = object.interfaces[interface] ?? [:]
                for name in properties.keys.sorted() {
                    let type = properties[name]?.signature ?? "v"
                    xml += "    <property name=\"\(escaped(name))\" type=\"\(escaped(type))\" access=\"\(access)\"/>\n"
                }
                xml += "  </interface>\n"
            }
        }
        for child in children(of: path) {
            xml += "  <node name=\"\(escaped(child))\"/>\n"
        }
        return xml + "</node>\n"
    }

    /// The next path element of every object below `path`.
    private func children(of path: ObjectPath) -> [String] {
        let prefix = path.rawValue == "/" ? "/" : path.rawValue + "/"
        var names: Set<String> = []
        for candidate in objects.keys where candidate.rawValue.hasPrefix(prefix) && candidate != path {
            if let first = candidate.rawValue.dropFirst(prefix.count).split(separator: "/").first {
                names.insert(String(first))
            }
        }
        return names.sorted()
    }

    private static let propertiesInterface = """
          <interface name="org.freedesktop.DBus.Properties">
            <method name="Get"><arg name="interface" type="s" direction="in"/><arg name="name" type="s" direction="in"/><arg name="value" type="v" direction="out"/></method>
            <method name="GetAll"><arg name="interface" type="s" direction="in"/><arg name="properties" type="a{sv}" direction="out"/></method>
            <method name="Set"><arg name="interface" type="s" direction="in"/><arg name="name" type="s" direction="in"/><arg name="value" type="v" direction="in"/></method>
            <signal name="PropertiesChanged"><arg name="interface" type="s"/><arg name="changed" type="a{sv}"/><arg name="invalidated" type="as"/></signal>
          </interface>

        """

    private func escaped(_ text: String) -> String {
        var result = ""
        for character in text {
            switch character {
            case "&": result += "&amp;"
            case "<": result += "&lt;"
            case ">": result += "&gt;"
            case "\"": result += "&quot;"
            default: result.append(character)
            }
        }
        return result
    }
}
