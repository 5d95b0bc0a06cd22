import Testing
import VigilSerial

/// Line control on a pty: a pty has no modem lines and no RS-485, so these
/// prove the typed errors and the settings a pty does keep (speed through
/// termios2, HUPCL); the electrical side is the lab's (CDC-ACM gadget).
@Suite struct SerialLinesTests {
    @Test func ptyHasNoModemLinesAndSaysSo() throws {
        try withPortOnPty { port, _ throws in
            #expect(throws: SerialLineError.notSupported(path: port.path, operation: "modem lines (TIOCMGET)")) {
                try port.modemLines()
            }
            #expect(throws: SerialLineError.notSupported(path: port.path, operation: "dropping DTR/RTS (TIOCMBIC)")) {
                try port.setModemLines([.dtr, .rts], up: false)
            }
            #expect(throws: SerialLineError.self) { try port.modemLineCounters() }
            #expect(throws: SerialLineError.notSupported(path: port.path, operation: "RS-485 (TIOCSRS485)")) {
                try port.setRS485(RS485Settings())
            }
            #expect(throws: SerialLineError.notSupported(path: port.path, operation: "modem lines (TIOCMGET)")) {
                try port.setModemLines(dtr: true, rts: false)
            }
            // Input lines only, or none: nothing to set, so nothing is asked of the driver.
            try port.setModemLines([.cts, .dsr], up: true)
            try port.setModemLines(dtr: nil, rts: nil)
        }
    }

    @Test func breakOnAPtyIsTakenAndIgnored() throws {
        try withPortOnPty { port, _ throws in
            try port.setBreak(true)
            try port.setBreak(false)
        }
    }

    @Test func rs485DelaysAreCheckedBeforeTheDriver() throws {
        _ = try withPortOnPty { port, _ throws in
            #expect(throws: SerialLineError.invalidValue("RS-485 delays must be 0 to 100 ms")) {
                try port.setRS485(RS485Settings(delayBeforeSend: 101))
            }
        }
    }

    @Test(arguments: [250_000, 1_250_000, 74_880])
    func customRateIsSetWithBOTHER(rate: Int) throws {
        try withPortOnPty(SerialSettings(baudRate: rate)) { port, _ throws in
            let seen = try #require(try port.currentSettings())
            #expect(seen.baudRate == rate)
            // Back to a table rate: the table's constant replaces BOTHER.
            try port.apply(SerialSettings(baudRate: 9600))
            #expect(try port.currentSettings()?.baudRate == 9600)
        }
    }

    @Test func hupclFollowsTheSettings() throws {
        try withPortOnPty(SerialSettings(hangupOnClose: false)) { port, _ throws in
            #expect(try !port.hangsUpOnClose())
            try port.apply(SerialSettings(hangupOnClose: true))
            #expect(try port.hangsUpOnClose())
            // Left out: the driver's setting stays.
            try port.apply(SerialSettings())
            #expect(try port.hangsUpOnClose())
        }
    }

    @Test func modemLinesNameTheirBits() {
        #expect(ModemLines([.dtr, .cts]).description == "dtr cts")
        #expect(ModemLines().description == "none")
        let earlier = ModemLineCounters(cts: 1, dsr: 2, ri: 3, dcd: 4)
        #expect(ModemLineCounters(cts: 2, dsr: 2, ri: 3, dcd: 5).changed(since: earlier) == [.cts, .dcd])
    }
}
