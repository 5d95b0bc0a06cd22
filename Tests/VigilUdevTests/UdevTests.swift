import Glibc
import Testing
import VigilSerial
import VigilSystem
import VigilUdev

/// Values the testbed (umockdev-testbed.py) is built with.
private enum Fake {
    static let usb = "/sys/devices/pci0000:00/0000:00:14.0/usb1/1-2"
    static let tty = usb + "/1-2:1.0/tty/ttyACM0"
    static let replugged = usb + "/1-2:1.0/tty/ttyACM1"
    static let byID = "/dev/serial/by-id/usb-Vigil_Labs_Vigil_Sensor_VGL123-if00"
    static let identity = USBDeviceInfo(
        vendorID: 0x1209, productID: 0x0001, serialNumber: "VGL123", manufacturer: "Vigil Labs",
        product: "Vigil Sensor", deviceRevision: "1.02", busNumber: 1, deviceNumber: 5, sysPath: usb)
}

@Suite struct UdevValueTests {
    @Test func bcdDeviceBecomesMajorDotMinor() {
        #expect(USBDeviceInfo.revision(bcd: "0102") == "1.02")
        #expect(USBDeviceInfo.revision(bcd: "1000\n") == "10.00")
        #expect(USBDeviceInfo.revision(bcd: "12") == nil)
        #expect(Fake.identity.vendorProductID == "1209:0001")
    }

    @Test func identityFromPropertiesWhenSysfsIsGone() {
        let info = USBDeviceInfo(properties: [
            "ID_VENDOR_ID": "1209", "ID_MODEL_ID": "0001", "ID_SERIAL_SHORT": "VGL123",
            "ID_VENDOR_ENC": "Vigil\\x20Labs", "ID_MODEL": "Vigil_Sensor", "ID_REVISION": "0102",
        ])
        #expect(info == USBDeviceInfo(
            vendorID: 0x1209, productID: 1, serialNumber: "VGL123", manufacturer: "Vigil Labs",
            product: "Vigil_Sensor", deviceRevision: "1.02"))
        #expect(USBDeviceInfo(properties: ["ID_VENDOR_ID": "1209"]) == nil)
    }

    @Test func actionsParse() {
        #expect(["add", "remove", "change", "bind", "unbind", "move"].map(UdevAction.init)
            == [.add, .remove, .change, .bind, .unbind, .other("move")])
    }

    /// On these machines there is no udevd: the monitor opens, and stays silent.
    @Test(.enabled(if: !Umockdev.isChild)) func monitorOpensWithoutUdevd() throws {
        let udev = try Udev()
        let monitor = try UdevMonitor(udev: udev)
        #expect(monitor.fd >= 0)
        #expect(fcntl(monitor.fd, F_GETFL) & O_NONBLOCK != 0)
        #expect(monitor.receiveBufferSize >= 200_000)
        print("udev monitor receive buffer: \(monitor.receiveBufferSize) bytes (asked for 4 MiB)")
        #expect(monitor.receive() == nil)
        _ = try udev.devices(subsystem: "tty")  // whatever the host has; must not throw
    }
}

@Suite(.enabled(if: !Umockdev.isChild))
struct UmockdevTests {
    @Test(.enabled(if: Umockdev.unavailableReason == nil, "\(Umockdev.unavailableReason ?? "")"))
    func enumerationIdentityHotplugAndNodeInATestbed() throws {
        let log = "/tmp/vigil-umockdev-\(getpid())-\(MonotonicInstant.now().nanoseconds).log"
        let output = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        try #require(output >= 0)
        defer { unlink(log) }
        var environment = SpawnRequest.currentEnvironment()
        environment[Umockdev.childFlag] = "1"
        let request = SpawnRequest(
            executable: "/usr/bin/umockdev-wrapper",
            arguments: ["/usr/bin/python3", Umockdev.harness, "--", try Umockdev.ownExecutable(),
                        "--testing-library", "swift-testing", "--filter", "UmockdevChild"],
            environment: environment,
            output: output)
        let status = try Umockdev.run(request, timeoutSeconds: 120)
        close(output)
        let transcript = (try? readFile(log)) ?? "(no output)"
        #expect(status == .exited(0), "testbed run failed (\(String(describing: status))):\n\(transcript)")
    }
}

/// The checks, run only inside the testbed (see `Umockdev`).
@Suite(.enabled(if: Umockdev.isChild, "runs inside umockdev, started by UmockdevTests"))
struct UmockdevChild {
    @Test func enumerationIdentityHotplugAndNode() throws {
        let control = try TestbedControl()
        let udev = try Udev()
        // Monitor first, then enumerate, as the daemon must (no gap).
        let monitor = try UdevMonitor(udev: udev, subsystems: ["tty", "usb"])
        #expect(monitor.receive() == nil, "nothing pending yet")

        // Enumeration: the tty, with the identity of its USB parent.
        let ttys = try udev.devices(subsystem: "tty")
        #expect(Set(ttys.map(\.sysName)) == ["ttyACM0", "ttyS0"])
        let acm = try #require(ttys.first { $0.sysName == "ttyACM0" })
        #expect(acm.sysPath == Fake.tty)
        #expect(acm.devNode == "/dev/ttyACM0")
        #expect(acm.subsystem == "tty")
        #expect(acm.action == nil)
        #expect(acm.usb == Fake.identity, "USB identity must come from the parent's sysfs attributes")
        #expect(acm[property: "VIGIL_ACCESSORY"] == "1")
        #expect(acm[property: "VIGIL_PROTOCOLS"]?.split(separator: " ") == ["org.example.sensor", "org.example.dfu"])
        #expect(acm[property: "ID_VENDOR_ENC"] == "Vigil\\x20Labs")
        #expect(acm[property: "ID_USB_INTERFACE_NUM"] == "00")
        #expect(acm.devLinks.contains(Fake.byID))
        let settings = try SerialSettings(parsing: try #require(acm[property: "VIGIL_SERIAL"]))
        #expect(settings == SerialSettings(flowControl: .rtsCts))

        let uart = try #require(ttys.first { $0.sysName == "ttyS0" })
        #expect(uart.usb == nil, "a platform UART has no USB identity")
        #expect(uart[property: "VIGIL_ACCESSORY"] == nil)
        #expect(try udev.device(sysPath: Fake.tty) == acm)
        #expect(throws: SystemError.self) { try udev.device(sysPath: "/sys/devices/vigil/none") }
        let usbDevices = try udev.devices(subsystem: "usb")
        #expect(usbDevices.first { $0.devType == "usb_device" }?.usb == Fake.identity)
        #expect(usbDevices.first { $0.devType == "usb_interface" }?.driver == "cdc_acm")

        // The pty-backed node, as a serial port.
        let port = try SerialPort.open(path: try #require(acm.devNode), settings: settings)
        print("under umockdev: TIOCEXCL \(port.isExclusive ? "works" : "fails (ENOTTY)"), "
              + "line counters \(port.lineCounters().map { "\($0)" } ?? "none")")
        control.write(Array("hello\u{0}\u{FF}".utf8))
        #expect(try read(port, count: 8) == Array("hello\u{0}\u{FF}".utf8))
        try port.writeAll(Array("ping".utf8))
        #expect(control.read(count: 4) == Array("ping".utf8))

        // Hot-plug: a uevent of another subsystem is filtered out; tty add arrives.
        #expect(control.request("uevent add /sys/devices/virtual/misc/vigil-noise") == "ok")
        #expect(control.request("uevent add \(Fake.tty)") == "ok")
        let added = try #require(next(monitor))
        #expect(added.action == .add)
        #expect(added.sysPath == Fake.tty)
        #expect(added.devNode == "/dev/ttyACM0")
        #expect(added.usb == Fake.identity)
        #expect(added[property: "VIGIL_PROTOCOLS"] == acm[property: "VIGIL_PROTOCOLS"])
        #expect(monitor.receive() == nil, "one uevent, one device")

        // Unplug: the open port hangs up, and remove arrives with the same
        // identity although sysfs is gone by the time it is read.
        #expect(control.request("unplug") == "ok")
        #expect(try read(port, count: 1) == [], "data after unplug")
        var buffer = [UInt8](repeating: 0, count: 16)
        #expect(try buffer.withUnsafeMutableBytes { try port.read(into: $0) } == .hangup)
        port.close()
        let removals = (0..<3).compactMap { _ in next(monitor) }
        #expect(removals.map(\.action) == [.remove, .remove, .remove])
        #expect(removals.map(\.sysPath) == [Fake.tty, Fake.usb + "/1-2:1.0", Fake.usb])
        let removed = try #require(removals.first)
        // Same identity, although sysfs was gone when the event was read:
        // it comes from the event's properties, so there is no parent path.
        var fromProperties = Fake.identity
        (fromProperties.sysPath, fromProperties.busNumber, fromProperties.deviceNumber) = (nil, nil, nil)
        #expect(removed.usb == fromProperties)
        #expect(removed.devNode == "/dev/ttyACM0")
        #expect(try udev.devices(subsystem: "tty").map(\.sysName) == ["ttyS0"])

        // Replug: back under another name, same identity; the kernel's order of adds.
        #expect(control.request("replug") == "ok \(Fake.replugged)")
        let additions = (0..<3).compactMap { _ in next(monitor) }
        #expect(additions.map(\.action) == [.add, .add, .add])
        #expect(additions.map(\.devType) == ["usb_device", "usb_interface", nil])
        #expect(additions.allSatisfy { $0.usb == Fake.identity })
        let replugged = try #require(additions.last)
        #expect(replugged.sysPath == Fake.replugged)
        #expect(replugged.devNode == "/dev/ttyACM1")
        #expect(next(monitor, timeoutMs: 200) == nil, "no further events")
        let again = try SerialPort.open(path: "/dev/ttyACM1", settings: settings)
        control.write([0x42])
        #expect(try read(again, count: 1) == [0x42])
        again.close()

        #expect(control.request("done") == "ok")
    }

    /// The next event within 5 s, waiting on the fd as the daemon's loop does.
    private func next(_ monitor: UdevMonitor, timeoutMs: Int = 5000) -> UdevDevice? {
        var request = pollfd(fd: monitor.fd, events: Int16(POLLIN), revents: 0)
        for _ in 0..<(timeoutMs / 100) {
            if let device = monitor.receive() {
                print("event: \(device.action.map { "\($0)" } ?? "-") \(device.sysPath)")
                return device
            }
            _ = poll(&request, 1, 100)
        }
        return nil
    }

    private func read(_ port: SerialPort, count: Int) throws -> [UInt8] {
        var result: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 256)
        var request = pollfd(fd: port.fd, events: Int16(POLLIN), revents: 0)
        while result.count < count {
            switch try buffer.withUnsafeMutableBytes({ try port.read(into: $0) }) {
            case .bytes(let got): result += buffer[..<got]
            case .wouldBlock: if poll(&request, 1, 2000) == 0 { return result }
            case .hangup: return result
            }
        }
        return result
    }
}

private func readFile(_ path: String) throws -> String {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { throw HarnessError("open \(path): errno \(errno)") }
    defer { close(fd) }
    var bytes: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65536)
    while true {
        let count = Glibc.read(fd, &buffer, buffer.count)
        if count <= 0 { break }
        bytes += buffer[..<count]
    }
    return String(decoding: bytes, as: UTF8.self)
}
