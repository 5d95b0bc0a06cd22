import Glibc
import Testing
import VigilSerial

/// A pty whose device side is open as a `SerialPort`; both closed afterwards.
func withPortOnPty<Result>(
    _ settings: SerialSettings = .default,
    _ body: (SerialPort, PseudoTerminal) throws -> Result
) throws -> Result {
    let pty = try PseudoTerminal.open()
    let port = try SerialPort.open(path: pty.devicePath, settings: settings)
    defer {
        port.close()
        pty.close()  // idempotent: the hang-up test closes it first
    }
    return try body(port, pty)
}

/// Waits for `events` on `fd`; returns revents (0 on timeout).
@discardableResult
func waitFor(_ fd: Int32, _ events: Int32, timeoutMs: Int32) -> Int16 {
    var request = pollfd(fd: fd, events: Int16(events), revents: 0)
    while true {
        let result = poll(&request, 1, timeoutMs)
        if result >= 0 { return result == 0 ? 0 : request.revents }
        if errno != EINTR { return Int16(POLLERR) }
    }
}

/// Writes all of `bytes` to the (non-blocking) controller, polling for room.
func controllerWrite(_ pty: PseudoTerminal, _ bytes: [UInt8]) {
    var offset = 0
    while offset < bytes.count {
        let count = bytes[offset...].withUnsafeBytes { write(pty.controller, $0.baseAddress, $0.count) }
        if count > 0 { offset += count; continue }
        #expect(errno == EAGAIN, "controller write: errno \(errno)")
        if errno != EAGAIN { return }
        waitFor(pty.controller, POLLOUT, timeoutMs: 1000)
    }
}

/// Reads from the controller until `count` bytes came or `timeoutMs` of silence.
func controllerRead(_ pty: PseudoTerminal, count: Int, timeoutMs: Int32 = 2000) -> [UInt8] {
    var result: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65536)
    while result.count < count {
        guard waitFor(pty.controller, POLLIN, timeoutMs: timeoutMs) & Int16(POLLIN) != 0 else { break }
        let got = read(pty.controller, &buffer, min(buffer.count, count - result.count))
        if got <= 0 { break }
        result += buffer[..<got]
    }
    return result
}

/// Reads from the port, the way the daemon's loop will, until `count` bytes
/// came, the port hangs up, or `timeoutMs` of silence.
func portRead(_ port: SerialPort, count: Int, timeoutMs: Int32 = 2000) throws -> [UInt8] {
    var result: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65536)
    while result.count < count {
        switch try buffer.withUnsafeMutableBytes({ try port.read(into: $0) }) {
        case .bytes(let got): result += buffer[..<got]
        case .wouldBlock:
            guard waitFor(port.fd, POLLIN, timeoutMs: timeoutMs) != 0 else { return result }
        case .hangup: return result
        }
    }
    return result
}

/// A recognisable pattern where any lost, repeated or reordered byte shows.
func pattern(count: Int, seed: UInt32 = 1) -> [UInt8] {
    var state = seed
    return (0..<count).map { _ in
        state = state &* 1_664_525 &+ 1_013_904_223
        return UInt8(truncatingIfNeeded: state >> 24)
    }
}

/// Polls `condition` every millisecond for up to `timeoutMs`; whether it held.
func eventually(timeoutMs: Int = 2000, _ condition: () throws -> Bool) rethrows -> Bool {
    for _ in 0..<timeoutMs {
        if try condition() { return true }
        usleep(1000)
    }
    return try condition()
}
