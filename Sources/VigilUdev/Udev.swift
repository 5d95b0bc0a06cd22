internal import CUdev
import Glibc
import SystemPackage
import VigilSystem

/// A libudev context: enumerates devices and looks them up.
///
/// libudev is not thread-safe, so neither is this: keep a `Udev` and the
/// monitors made from it on one thread (the daemon's event loop, or one
/// actor). It is deliberately not `Sendable`. What it returns,
/// `UdevDevice`, is a plain value that can go anywhere.
public final class Udev {
    let handle: OpaquePointer

    public init() throws {
        guard let handle = udev_new() else { throw SystemError(Errno(rawValue: errno), "udev_new") }
        self.handle = handle
    }

    deinit {
        udev_unref(handle)
    }

    /// Every device of a subsystem that sysfs has now, e.g. "tty" for serial
    /// ports (real UARTs, USB CDC-ACM and USB-serial adapters alike).
    public func devices(subsystem: String) throws -> [UdevDevice] {
        guard let enumerate = udev_enumerate_new(handle) else {
            throw SystemError(Errno(rawValue: errno), "udev_enumerate_new")
        }
        defer { udev_enumerate_unref(enumerate) }
        try checkUdev("udev_enumerate_add_match_subsystem", subsystem) {
            udev_enumerate_add_match_subsystem(enumerate, subsystem)
        }
        try checkUdev("udev_enumerate_scan_devices", subsystem) { udev_enumerate_scan_devices(enumerate) }
        var result: [UdevDevice] = []
        for (sysPath, _) in UdevList(udev_enumerate_get_list_entry(enumerate)) {
            // A device can vanish between the scan and the lookup: skip it.
            guard let device = udev_device_new_from_syspath(handle, sysPath) else { continue }
            defer { udev_device_unref(device) }
            result.append(UdevDevice(device))
        }
        return result
    }

    /// The device at a /sys path.
    public func device(sysPath: String) throws -> UdevDevice {
        guard let device = udev_device_new_from_syspath(handle, sysPath) else {
            throw SystemError(Errno(rawValue: errno), "udev_device_new_from_syspath", path: sysPath)
        }
        defer { udev_device_unref(device) }
        return UdevDevice(device)
    }

    /// The device behind a character device node or a symlink to one
    /// (/dev/serial/by-id/...), for config entries that name a path.
    public func device(devNode: String) throws -> UdevDevice {
        var info = stat()
        guard stat(devNode, &info) == 0 else { throw SystemError(Errno(rawValue: errno), "stat", path: devNode) }
        guard info.st_mode & S_IFMT == S_IFCHR else {
            throw SystemError(Errno(rawValue: ENODEV), "not a character device", path: devNode)
        }
        guard let device = udev_device_new_from_devnum(handle, CChar(UInt8(ascii: "c")), info.st_rdev) else {
            throw SystemError(Errno(rawValue: errno), "udev_device_new_from_devnum", path: devNode)
        }
        defer { udev_device_unref(device) }
        return UdevDevice(device)
    }
}

/// libudev calls return a negative errno.
func checkUdev(_ operation: String, _ path: String? = nil, _ call: () -> Int32) throws(SystemError) {
    let result = call()
    if result < 0 { throw SystemError(Errno(rawValue: -result), operation, path: path) }
}

/// A udev_list_entry chain as (name, value) pairs. The entries belong to
/// the object they came from: copy them out before it is unreferenced.
struct UdevList: Sequence, IteratorProtocol {
    private var entry: OpaquePointer?

    init(_ first: OpaquePointer?) {
        entry = first
    }

    mutating func next() -> (String, String?)? {
        guard let current = entry else { return nil }
        entry = udev_list_entry_get_next(current)
        let name = udev_list_entry_get_name(current).map { String(cString: $0) } ?? ""
        return (name, udev_list_entry_get_value(current).map { String(cString: $0) })
    }
}

extension UdevDevice {
    /// Copies everything out of a libudev device (which the caller still owns).
    init(_ device: OpaquePointer) {
        let string = { (pointer: UnsafePointer<CChar>?) in pointer.map { String(cString: $0) } }
        var properties: [String: String] = [:]
        for (name, value) in UdevList(udev_device_get_properties_list_entry(device)) {
            properties[name] = value ?? ""
        }
        var devLinks = UdevList(udev_device_get_devlinks_list_entry(device)).map(\.0)
        if devLinks.isEmpty, let links = properties["DEVLINKS"] {
            devLinks = links.split(separator: " ").map(String.init)
        }
        self.init(
            sysPath: string(udev_device_get_syspath(device)) ?? "",
            devNode: string(udev_device_get_devnode(device)),
            subsystem: string(udev_device_get_subsystem(device)),
            devType: string(udev_device_get_devtype(device)),
            // The sysfs "driver" link, else the uevent's DRIVER (umockdev has no links).
            driver: string(udev_device_get_driver(device)) ?? properties["DRIVER"],
            action: string(udev_device_get_action(device)).map(UdevAction.init),
            properties: properties,
            devLinks: devLinks,
            usb: USBDeviceInfo(parentOf: device) ?? USBDeviceInfo(properties: properties))
    }
}

extension USBDeviceInfo {
    /// From the sysfs attributes of the nearest usb_device ancestor (or the
    /// device itself); nil when there is none or it has no idVendor/idProduct.
    init?(parentOf device: OpaquePointer) {
        // The parent belongs to `device`: no unref.
        let usb = udev_device_get_devtype(device).map { String(cString: $0) } == "usb_device"
            ? device
            : udev_device_get_parent_with_subsystem_devtype(device, "usb", "usb_device")
        guard let usb else { return nil }
        func attribute(_ name: String) -> String? {
            udev_device_get_sysattr_value(usb, name).map { String(cString: $0).trimmingWhitespace() }
        }
        guard let vendor = attribute("idVendor").flatMap({ UInt16($0, radix: 16) }),
              let product = attribute("idProduct").flatMap({ UInt16($0, radix: 16) })
        else { return nil }
        self.init(
            vendorID: vendor,
            productID: product,
            serialNumber: attribute("serial"),
            manufacturer: attribute("manufacturer"),
            product: attribute("product"),
            deviceRevision: attribute("bcdDevice").flatMap(USBDeviceInfo.revision(bcd:)),
            busNumber: attribute("busnum").flatMap { Int($0) },
            deviceNumber: attribute("devnum").flatMap { Int($0) },
            sysPath: udev_device_get_syspath(usb).map { String(cString: $0) })
    }
}
