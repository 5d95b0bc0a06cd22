import VigilProtocol

/// What the daemon saw of a serial device node (through udev), before deciding
/// whether it is an accessory. Plain data, so the domain needs no libudev.
public struct DeviceObservation: Sendable, Equatable {
    public var sysPath: String
    public var devNode: String
    /// A tty or a hidraw node.
    public var kind: DeviceKind
    /// udev properties: ID_VENDOR_ID, ID_SERIAL_SHORT, VIGIL_PROTOCOLS, …
    public var properties: [String: String]
    public var devLinks: [String]
    public var usb: USBIdentity?

    public init(
        sysPath: String, devNode: String, kind: DeviceKind = .serial, properties: [String: String] = [:], devLinks: [String] = [],
        usb: USBIdentity? = nil
    ) {
        self.sysPath = sysPath
        self.kind = kind
        self.devNode = devNode
        self.properties = properties
        self.devLinks = devLinks
        self.usb = usb
    }
}

/// Which kind of device node an accessory is.
public enum DeviceKind: String, Sendable, Hashable {
    /// A tty (udev subsystem `tty`): a byte stream with line settings.
    case serial
    /// A hidraw node (udev subsystem `hidraw`): input, output and feature reports.
    case hid
}

/// The USB device a serial node belongs to, from its descriptors.
public struct USBIdentity: Sendable, Hashable {
    /// Four lowercase hex digits.
    public var vendorID: String
    public var productID: String
    public var serialNumber: String?
    public var manufacturer: String?
    public var product: String?
    /// bcdDevice, e.g. "1.02".
    public var revision: String?

    public init(vendorID: String, productID: String, serialNumber: String? = nil, manufacturer: String? = nil, product: String? = nil, revision: String? = nil) {
        self.vendorID = vendorID.lowercased()
        self.productID = productID.lowercased()
        self.serialNumber = serialNumber
        self.manufacturer = manufacturer
        self.product = product
        self.revision = revision
    }
}

/// Who an accessory is, independent of the node it got this time: a
/// replugged device may come back as another /dev/ttyACMn.
public struct AccessoryIdentity: Sendable, Hashable, Codable, CustomStringConvertible {
    public var key: String

    init(_ observation: DeviceObservation) {
        if let usb = observation.usb {
            // Without a serial number, the USB port path is the best identity left.
            let serial = usb.serialNumber.flatMap { $0.isEmpty ? nil : DeviceText.bounded($0) }
                ?? "port:" + Self.usbPortPath(observation.sysPath)
            key = "usb:\(usb.vendorID):\(usb.productID):\(serial)"
        } else {
            key = "node:" + observation.sysPath
        }
        // A device with a serial and a HID interface is two accessories, one identity each.
        if observation.kind == .hid { key = "hid:" + key }
    }

    public var description: String { key }

    /// ".../usb1/1-1/1-1:1.0/tty/ttyACM0" → "1-1";
    /// ".../usb1/1-1/1-1:1.0/0003:1209:0002.0001/hidraw/hidraw0" → "1-1".
    static func usbPortPath(_ sysPath: String) -> String {
        let parts = sysPath.split(separator: "/")
        if let tty = parts.lastIndex(of: "tty"), tty >= 2 { return String(parts[tty - 2]) }
        if let hidraw = parts.lastIndex(of: "hidraw"), hidraw >= 3 { return String(parts[hidraw - 3]) }
        return sysPath
    }
}
