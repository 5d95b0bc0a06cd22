import Glibc
import Testing
import VigilL2CAP

@Suite struct L2CAPSocketTests {
    @Test func addressesParseAndPrintMostSignificantByteFirst() throws {
        let address = try #require(BluetoothDeviceAddress("c0:de:00:00:00:01"))
        #expect(address.description == "C0:DE:00:00:00:01")
        #expect(address.littleEndianBytes == [0x01, 0x00, 0x00, 0x00, 0xDE, 0xC0])
        for bad in ["", "C0:DE:00:00:00", "C0:DE:00:00:00:01:02", "C0:DE:00:00:00:1", "G0:DE:00:00:00:01", "C0-DE-00-00-00-01"] {
            #expect(BluetoothDeviceAddress(bad) == nil, "\(bad)")
        }
        #expect(BluetoothAddressType(blueZ: "random") == .leRandom)
        #expect(BluetoothAddressType(blueZ: "public") == .lePublic)
        #expect(BluetoothAddressType(blueZ: "br/edr") == nil)
    }

    @Test func lePSMsAreOneTo255() throws {
        #expect(try L2CAPPSM(le: 0x80).isDynamic)
        #expect(try !L2CAPPSM(le: 0x25).isDynamic)
        for bad in [0, 256, -1, 0x1001] {
            #expect(throws: BluetoothSocketError.self) { try L2CAPPSM(le: bad) }
        }
        do {
            _ = try L2CAPPSM(le: 300)
        } catch {
            #expect(error.description.contains("1-255"))
        }
        #expect(L2CAPSecurity(name: "medium") == .medium)
        #expect(L2CAPSecurity(name: "paranoid") == nil)
    }

    /// On a kernel without Bluetooth (the CI hosts) every socket call says so
    /// in one clear error; with Bluetooth (the lab guest) the probe passes and
    /// a listener gets a dynamic LE PSM.
    @Test func withoutBluetoothEveryCallSaysSo() throws {
        guard let problem = BluetoothSocket.probe() else {
            let listener = try BluetoothSocket.listen(psm: nil)
            #expect(try listener.localPSM().isDynamic)
            #expect(try listener.acceptL2CAP() == nil)
            return
        }
        guard case let .bluetoothUnavailable(errno) = problem else {
            Issue.record("socket(AF_BLUETOOTH) failed otherwise: \(problem)")
            return
        }
        #expect(errno.rawValue == EAFNOSUPPORT || errno.rawValue == EPROTONOSUPPORT)
        #expect(problem.description.hasPrefix("Bluetooth unavailable"))
        let address = try #require(BluetoothDeviceAddress("C0:DE:00:00:00:01"))
        #expect(throws: problem) { try BluetoothSocket.connect(to: address, type: .leRandom, psm: L2CAPPSM(le: 0x80)) }
        #expect(throws: problem) { try BluetoothSocket.listen(psm: nil) }
    }
}
