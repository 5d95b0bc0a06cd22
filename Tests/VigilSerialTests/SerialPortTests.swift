import Glibc
import Testing
import VigilSerial

@Suite struct SerialPortTests {
    @Test func everyByteValueArrivesIntactBothWays() throws {
        try withPortOnPty { port, pty throws in
            let all = (0...255).map(UInt8.init)
            controllerWrite(pty, all)
            #expect(try portRead(port, count: 256) == all)
            try port.writeAll(all.reversed())
            #expect(controllerRead(pty, count: 256) == all.reversed())
        }
    }

    /// One thread pumps both ends without blocking, so both sides' buffers
    /// fill and drain over and over (writes hit EAGAIN: back-pressure, not loss).
    @Test(arguments: [true, false])
    func oneMebibyteStreamArrivesComplete(towardPort: Bool) throws {
        try withPortOnPty { port, pty throws in
            let payload = pattern(count: 1 << 20, seed: towardPort ? 7 : 8)
            var sent = 0
            var received: [UInt8] = []
            received.reserveCapacity(payload.count)
            var buffer = [UInt8](repeating: 0, count: 16384)
            var blockedWrites = 0
            while received.count < payload.count {
                if sent < payload.count {
                    let chunk = payload[sent..<min(sent + 65536, payload.count)]
                    let wrote: Int? = try chunk.withUnsafeBytes { bytes in
                        if towardPort {
                            let count = write(pty.controller, bytes.baseAddress, bytes.count)
                            return count >= 0 ? count : nil
                        }
                        return try port.write(bytes)
                    }
                    if wrote == nil || wrote! < chunk.count { blockedWrites += 1 }
                    sent += wrote ?? 0
                }
                if towardPort {
                    switch try buffer.withUnsafeMutableBytes({ try port.read(into: $0) }) {
                    case .bytes(let count): received += buffer[..<count]
                    case .wouldBlock: waitFor(port.fd, POLLIN, timeoutMs: 20)
                    case .hangup: Issue.record("hang-up mid-stream"); return
                    }
                } else {
                    let count = read(pty.controller, &buffer, buffer.count)
                    if count > 0 { received += buffer[..<count] } else { waitFor(pty.controller, POLLIN, timeoutMs: 20) }
                }
            }
            #expect(received.count == payload.count)
            #expect(received == payload)
            // Whether the writer ever met a full buffer depends on scheduling;
            // writesReportBackPressureWhenNobodyReads proves back-pressure.
            print("1 MiB stream: \(blockedWrites) write(s) met a full buffer")
        }
    }

    @Test func emptyPortWouldBlockAndIsNotAHangup() throws {
        try withPortOnPty { port, pty throws in
            var buffer = [UInt8](repeating: 0, count: 64)
            #expect(try buffer.withUnsafeMutableBytes { try port.read(into: $0) } == .wouldBlock)
            controllerWrite(pty, [1, 2, 3])
            #expect(try portRead(port, count: 3) == [1, 2, 3])
            #expect(try buffer.withUnsafeMutableBytes { try port.read(into: $0) } == .wouldBlock)
            #expect(waitFor(port.fd, POLLIN, timeoutMs: 50) == 0, "an idle port must not look readable")
        }
    }

    /// The unplug path: the loop must see `.hangup` once and stop, not read
    /// end-of-file forever at 100% CPU.
    @Test func closingTheControllerIsAHangupThatNeverSpins() throws {
        try withPortOnPty { port, pty throws in
            controllerWrite(pty, Array("before".utf8))
            #expect(try portRead(port, count: 6) == Array("before".utf8))
            pty.close()

            var buffer = [UInt8](repeating: 0, count: 64)
            var reads = 0
            var result = SerialRead.wouldBlock
            while reads < 10 {
                let revents = waitFor(port.fd, POLLIN, timeoutMs: 2000)
                #expect(revents & Int16(POLLHUP) != 0, "a hung-up pty reports POLLHUP")
                reads += 1
                result = try buffer.withUnsafeMutableBytes { try port.read(into: $0) }
                if result == .hangup { break }
            }
            #expect(result == .hangup)
            #expect(reads == 1, "took \(reads) reads to notice the hang-up")
            for _ in 0..<100 {
                #expect(try buffer.withUnsafeMutableBytes { try port.read(into: $0) } == .hangup)
            }
            #expect(throws: SerialPortError.hungUp(path: port.path)) {
                try [UInt8(1)].withUnsafeBytes { try port.write($0) }
            }
        }
    }

    /// Bytes the device sent just before vanishing: measured, not promised
    /// (Linux flushes a pty's pending input on hang-up); nothing comes after `.hangup`.
    @Test func bytesJustBeforeAHangupThenNothing() throws {
        try withPortOnPty { port, pty throws in
            controllerWrite(pty, Array("tail".utf8))
            pty.close()
            var buffer = [UInt8](repeating: 0, count: 64)
            var delivered: [UInt8] = []
            var results: [SerialRead] = []
            while results.count < 10 {
                waitFor(port.fd, POLLIN, timeoutMs: 2000)
                let result = try buffer.withUnsafeMutableBytes { try port.read(into: $0) }
                results.append(result)
                if case .bytes(let count) = result { delivered += buffer[..<count] }
                if result == .hangup { break }
            }
            #expect(results.last == .hangup)
            #expect(results.count <= 2)
            #expect(Array("tail".utf8).starts(with: delivered))
            print("bytes written just before the controller closed: \(delivered.count) of 4 delivered, results \(results)")
        }
    }

    @Test func writesReportBackPressureWhenNobodyReads() throws {
        try withPortOnPty { port, pty throws in
            let chunk = [UInt8](repeating: 0x5A, count: 4096)
            var total = 0
            var full = false
            while total < 64 << 20 {
                guard let wrote = try chunk.withUnsafeBytes({ try port.write($0) }) else { full = true; break }
                #expect(wrote > 0)
                total += wrote
            }
            #expect(full, "64 MiB went in without back-pressure")
            print("pty output buffer took \(total) bytes before EAGAIN")
            // No check that POLLOUT is off now: the pty moves bytes to the
            // controller's side asynchronously, so room may reappear at once.
            let drained = controllerRead(pty, count: total, timeoutMs: 500)
            #expect(drained.count == total)
            #expect(drained.allSatisfy { $0 == 0x5A })
            #expect(try chunk.withUnsafeBytes { try port.write($0) } != nil, "writable again once drained")
        }
    }

    /// XOFF from the device stops the port's output (writes report
    /// back-pressure); XON resumes it; neither byte reaches the reader as data.
    @Test func xonXoffFlowControlApplies() throws {
        try withPortOnPty(try SerialSettings(parsing: "115200 8N1 xonxoff")) { port, pty throws in
            #expect(try port.currentSettings()?.flowControl == .xonXoff)
            controllerWrite(pty, [0x13])  // XOFF
            var accepted = 0  // before the XOFF took effect
            #expect(try eventually {
                guard let wrote = try [UInt8(1)].withUnsafeBytes({ try port.write($0) }) else { return true }
                accepted += wrote
                return false
            }, "writes still accepted after XOFF")
            let early = controllerRead(pty, count: accepted, timeoutMs: 200)
            #expect(controllerRead(pty, count: 1, timeoutMs: 200) == [], "output flowed despite XOFF")
            controllerWrite(pty, [0x11])  // XON
            #expect(waitFor(port.fd, POLLOUT, timeoutMs: 2000) & Int16(POLLOUT) != 0)
            // Bounded, not writeAll: a port that never resumes must fail the test, not hang it.
            let go = Array("go".utf8)
            var sent = 0
            #expect(try eventually {
                if let wrote = try go[sent...].withUnsafeBytes({ try port.write($0) }) { sent += wrote }
                return sent == go.count
            }, "output did not resume after XON")
            let seen = early + controllerRead(pty, count: accepted - early.count + 2)
            #expect(seen == [UInt8](repeating: 1, count: accepted) + Array("go".utf8))
            print("XOFF: \(accepted) byte(s) accepted, \(early.count) delivered before writes returned EAGAIN")
            var buffer = [UInt8](repeating: 0, count: 8)
            #expect(try buffer.withUnsafeMutableBytes { try port.read(into: $0) } == .wouldBlock,
                    "XON/XOFF leaked into the data")

            try port.apply(.default)
            #expect(try port.currentSettings()?.flowControl == SerialSettings.FlowControl.none)
            controllerWrite(pty, [0x13, 0x11])
            #expect(try portRead(port, count: 2) == [0x13, 0x11], "without flow control they are data")
            try port.writeAll([0x42])
            #expect(controllerRead(pty, count: 1) == [0x42], "without flow control XOFF stops nothing")
        }
    }

    @Test func ptyFacts() throws {
        try withPortOnPty(SerialSettings(baudRate: 9600, dataBits: 7, parity: .even, stopBits: 2)) { port, _ throws in
            #expect(port.isExclusive)
            #expect(port.lineCounters() == nil, "ptys keep no line counters")
            let seen = try #require(try port.currentSettings())
            // A pty forces 8 data bits and no parity, but keeps speed and stop bits.
            #expect(seen.dataBits == 8)
            #expect(seen.parity == .none)
            print("pty reports \(seen) after applying 9600 7E2")
            #expect(try port.queuedBytes() == (input: 0, output: 0))
        }
    }

    @Test func badSettingsAreRefusedBeforeTouchingTheDevice() throws {
        let pty = try PseudoTerminal.open()
        defer { pty.close() }
        #expect(throws: SerialSettingsError.unsupportedBaudRate(12)) {
            try SerialPort.open(path: pty.devicePath, settings: SerialSettings(baudRate: 12))
        }
        let port = try SerialPort.open(path: pty.devicePath)
        #expect(throws: SerialSettingsError.invalidDataBits(9)) { try port.apply(SerialSettings(dataBits: 9)) }
        #expect(try port.currentSettings() == .default)
    }

    @Test func missingDeviceIsASystemErrorNamingThePath() {
        #expect {
            try SerialPort.open(path: "/dev/vigil-no-such-tty")
        } throws: { error in
            "\(error)".contains("/dev/vigil-no-such-tty")
        }
    }
}
