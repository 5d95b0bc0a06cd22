/// One device as udev describes it: a snapshot, detached from libudev.
///
/// Accessories are identified by their USB identity (`usb`: vendor and
/// product id, serial number), never by `devNode`: a replugged device may
/// come back as /dev/ttyACM1.
public struct UdevDevice: Sendable, Hashable {
    /// e.g. /sys/devices/pci0000:00/0000:00:14.0/usb1/1-2/1-2:1.0/tty/ttyACM0.
    public var sysPath: String
    /// e.g. /dev/ttyACM0; nil for devices without a node (USB interfaces).
    public var devNode: String?
    /// e.g. "tty", "usb".
    public var subsystem: String?
    /// e.g. "usb_device", "usb_interface"; nil for ttys.
    public var devType: String?
    /// The kernel driver bound to the device, e.g. "cdc_acm" for a USB interface.
    public var driver: String?
    /// Set for devices received from a monitor; nil for enumerated ones.
    public var action: UdevAction?
    /// Every udev property: the kernel's (DEVNAME, MAJOR, ...), the ones
    /// udev's builtins add (ID_VENDOR_ID, ID_MODEL_ID, ID_SERIAL_SHORT,
    /// ID_VENDOR_ENC, ID_MODEL_ENC, ID_USB_INTERFACE_NUM, DEVLINKS, ...)
    /// and the ones rules set (VIGIL_*, see udev/README). Without udevd
    /// only the kernel's are there.
    public var properties: [String: String]
    /// Symlinks to the node, e.g. /dev/serial/by-id/usb-Vigil_Labs_Sensor_VGL123-if00.
    public var devLinks: [String]
    /// The USB device this one belongs to (its nearest `usb`/`usb_device`
    /// ancestor), or nil for a UART, a pty, or anything not on USB.
    public var usb: USBDeviceInfo?

    public init(
        sysPath: String,
        devNode: String? = nil,
        subsystem: String? = nil,
        devType: String? = nil,
        driver: String? = nil,
        action: UdevAction? = nil,
        properties: [String: String] = [:],
        devLinks: [String] = [],
        usb: USBDeviceInfo? = nil
    ) {
        self.sysPath = sysPath
        self.devNode = devNode
        self.subsystem = subsystem
        self.devType = devType
        self.driver = driver
        self.action = action
        self.properties = properties
        self.devLinks = devLinks
        self.usb = usb
    }

    /// The kernel's name, e.g. "ttyACM0": the last component of `sysPath`.
    public var sysName: String {
        String(sysPath.split(separator: "/").last ?? Substring(sysPath))
    }

    public subscript(property name: String) -> String? {
        properties[name]
    }
}

/// What happened to a device, from the uevent's ACTION.
public enum UdevAction: Sendable, Hashable, CustomStringConvertible {
    case add, remove, change, bind, unbind
    /// "move", "online", "offline" and anything newer kernels invent.
    case other(String)

    public init(_ name: String) {
        switch name {
        case "add": self = .add
        case "remove": self = .remove
        case "change": self = .change
        case "bind": self = .bind
        case "unbind": self = .unbind
        default: self = .other(name)
        }
    }

    public var description: String {
        switch self {
        case .add: "add"
        case .remove: "remove"
        case .change: "change"
        case .bind: "bind"
        case .unbind: "unbind"
        case .other(let name): name
        }
    }
}

/// A USB device's identity and descriptor strings.
///
/// Read from the `usb_device`'s sysfs attributes, which the kernel fills from
/// the device descriptor (no udev rules or udevd needed). For a "remove"
/// event sysfs is usually gone already; then the identity comes from the
/// event's properties (ID_VENDOR_ID, ID_MODEL_ID, ID_SERIAL_SHORT, ...),
/// which udevd copies from its database, and `sysPath` is nil.
public struct USBDeviceInfo: Sendable, Hashable {
    public var vendorID: UInt16
    public var productID: UInt16
    /// iSerialNumber; nil when the device has none (then several identical
    /// devices can only be told apart by port).
    public var serialNumber: String?
    /// iManufacturer.
    public var manufacturer: String?
    /// iProduct.
    public var product: String?
    /// bcdDevice as "major.minor", e.g. "1.02" for 0x0102.
    public var deviceRevision: String?
    public var busNumber: Int?
    public var deviceNumber: Int?
    /// The usb_device's sysfs path; nil when read from event properties.
    public var sysPath: String?

    public init(
        vendorID: UInt16,
        productID: UInt16,
        serialNumber: String? = nil,
        manufacturer: String? = nil,
        product: String? = nil,
        deviceRevision: String? = nil,
        busNumber: Int? = nil,
        deviceNumber: Int? = nil,
        sysPath: String? = nil
    ) {
        self.vendorID = vendorID
        self.productID = productID
        self.serialNumber = serialNumber
        self.manufacturer = manufacturer
        self.product = product
        self.deviceRevision = deviceRevision
        self.busNumber = busNumber
        self.deviceNumber = deviceNumber
        self.sysPath = sysPath
    }

    /// "1209:0001", as lsusb prints it.
    public var vendorProductID: String {
        hex4(vendorID) + ":" + hex4(productID)
    }

    /// From udev properties, for events whose sysfs is gone; nil without
    /// ID_VENDOR_ID and ID_MODEL_ID.
    public init?(properties: [String: String]) {
        guard let vendor = properties["ID_VENDOR_ID"].flatMap({ UInt16($0, radix: 16) }),
              let product = properties["ID_MODEL_ID"].flatMap({ UInt16($0, radix: 16) })
        else { return nil }
        self.init(
            vendorID: vendor,
            productID: product,
            serialNumber: properties["ID_SERIAL_SHORT"],
            manufacturer: properties["ID_VENDOR_ENC"].map(decodeUdevEscapes) ?? properties["ID_VENDOR"],
            product: properties["ID_MODEL_ENC"].map(decodeUdevEscapes) ?? properties["ID_MODEL"],
            deviceRevision: properties["ID_REVISION"].flatMap(USBDeviceInfo.revision(bcd:)),
            busNumber: properties["BUSNUM"].flatMap { Int($0) },
            deviceNumber: properties["DEVNUM"].flatMap { Int($0) })
    }

    /// "0102" (bcdDevice, BCD digits) -> "1.02"; nil if not 4 hex digits.
    public static func revision(bcd: String) -> String? {
        let digits = Array(bcd.trimmingWhitespace())
        guard digits.count == 4, digits.allSatisfy(\.isHexDigit) else { return nil }
        var major = String(digits[0...1])
        if major.hasPrefix("0") { major.removeFirst() }
        return major + "." + String(digits[2...3])
    }
}

private func hex4(_ value: UInt16) -> String {
    let digits = String(value, radix: 16)
    return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
}

/// Undoes udev's \xNN escaping (ID_VENDOR_ENC, ID_MODEL_ENC): "Vigil\x20Labs" -> "Vigil Labs".
func decodeUdevEscapes(_ text: String) -> String {
    var bytes: [UInt8] = []
    let utf8 = Array(text.utf8)
    var index = 0
    while index < utf8.count {
        if utf8[index] == UInt8(ascii: "\\"), index + 3 < utf8.count, utf8[index + 1] == UInt8(ascii: "x"),
           let value = UInt8(String(decoding: utf8[(index + 2)...(index + 3)], as: UTF8.self), radix: 16) {
            bytes.append(value)
            index += 4
        } else {
            bytes.append(utf8[index])
            index += 1
        }
    }
    return String(decoding: bytes, as: UTF8.self)
}

extension String {
    /// Without leading and trailing spaces and newlines (sysfs values end in "\n").
    func trimmingWhitespace() -> String {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\n" || $0 == "\t" || $0 == "\r" }
        guard let first = firstIndex(where: { !isSpace($0) }), let last = lastIndex(where: { !isSpace($0) }) else {
            return ""
        }
        return String(self[first...last])
    }
}
