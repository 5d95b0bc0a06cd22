import Foundation
import Glibc
import VigilKit
import VigilSerial

// The app side of scripts/bench-accessories (see docs/performance.md, "Accessories").
// Prints figures as JSON lines; asserts nothing.
//
//   vigil-accessory-bench --app --bytes N --record FILE [--protocol P]
//       launched by vigild: opens a session on the accessory's protocol, reads
//       N pattern bytes through AccessorySession (throughput), then records the
//       receive time of every later chunk (latency samples).
//   vigil-accessory-bench --direct /dev/ttyACM0 --bytes N
//       run inside the umockdev testbed: reads the same N bytes straight from
//       the node with SerialPort; prints "ready", then one JSON line.

/// Byte `i` of the stream the device writes: a period (251) prime to every chunk size.
@inline(__always) func pattern(_ index: Int) -> UInt8 { UInt8(truncatingIfNeeded: index % 251) }

struct Options {
    var direct: String?
    var app = false
    var bytes = 32 << 20
    var record = ""
    var protocolString = "org.example.sensor"

    static func parse(_ arguments: [String]) -> Options {
        var options = Options()
        var arguments = arguments[...]
        while let argument = arguments.popFirst() {
            switch argument {
            case "--direct": options.direct = arguments.popFirst()
            case "--app": options.app = true
            case "--bytes": options.bytes = Int(arguments.popFirst() ?? "") ?? options.bytes
            case "--record": options.record = arguments.popFirst() ?? ""
            case "--protocol": options.protocolString = arguments.popFirst() ?? options.protocolString
            default:
                FileHandle.standardError.write(
                    "usage: vigil-accessory-bench (--app --record FILE | --direct NODE) [--bytes N] [--protocol P]\n".data(using: .utf8)!)
                exit(2)
            }
        }
        return options
    }
}

/// Counts bytes, stamps the first and last, and checks them against `pattern`.
struct Tally {
    var count = 0
    var first: UInt64 = 0
    var last: UInt64 = 0
    var mismatches = 0
    var chunks = 0

    mutating func add(_ bytes: UnsafeRawBufferPointer, at now: UInt64) {
        if count == 0 { first = now }
        last = now
        chunks += 1
        var index = count
        for byte in bytes {
            if byte != pattern(index) { mismatches += 1 }
            index += 1
        }
        count = index
    }

    var json: String {
        "{\"kind\":\"throughput\",\"bytes\":\(count),\"first\":\(first),\"last\":\(last),\"chunks\":\(chunks),\"mismatches\":\(mismatches)}"
    }
}

/// Appends lines to the record file with write(2), so the driver sees each at once.
final class Record: @unchecked Sendable {
    let fd: Int32
    init(path: String) { fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644) }
    func line(_ text: String) {
        let bytes = Array((text + "\n").utf8)
        _ = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
    }
}

/// One line on stdout, unbuffered: the testbed waits for it.
func say(_ line: String) {
    let bytes = Array((line + "\n").utf8)
    _ = bytes.withUnsafeBytes { Glibc.write(1, $0.baseAddress, $0.count) }
}

func direct(node: String, bytes: Int) throws {
    let port = try SerialPort.open(path: node)
    say("ready")
    var tally = Tally()
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)
    defer { buffer.deallocate() }
    while tally.count < bytes {
        switch try port.read(into: buffer) {
        case let .bytes(count):
            tally.add(UnsafeRawBufferPointer(rebasing: buffer[0..<count]), at: MonotonicClock.now)
        case .wouldBlock:
            var poller = pollfd(fd: port.fd, events: Int16(POLLIN), revents: 0)
            _ = poll(&poller, 1, 10_000)
        case .hangup:
            say("{\"kind\":\"error\",\"error\":\"hangup after \(tally.count) bytes\"}")
            exit(1)
        }
    }
    say(tally.json)
}

func runApp(_ options: Options) async throws {
    let record = Record(path: options.record)
    let app = try await Application.connect()
    let events = Task {
        for await item in app.events {
            if case let .event(event) = item { app.acknowledge(event) }
        }
    }
    defer { events.cancel() }
    let accessories = try await app.accessoryManager.connectedAccessories()
    guard let accessory = accessories.first(where: { $0.protocolStrings.contains(options.protocolString) }) else {
        record.line("{\"kind\":\"error\",\"error\":\"no accessory speaks \(options.protocolString)\"}")
        return
    }
    let session = try await app.accessoryManager.openSession(to: accessory, protocol: options.protocolString)
    record.line("{\"kind\":\"ready\",\"session\":\(session.id)}")
    var tally = Tally()
    var reported = false
    for await chunk in session.bytes {
        let now = MonotonicClock.now
        if tally.count < options.bytes {
            let wanted = min(chunk.count, options.bytes - tally.count)
            chunk.withUnsafeBytes { tally.add(UnsafeRawBufferPointer(rebasing: $0[0..<wanted]), at: now) }
            if tally.count >= options.bytes && !reported {
                reported = true
                record.line(tally.json)
            }
            continue
        }
        // Latency samples: the first thing the handler does is read the clock.
        record.line("{\"kind\":\"sample\",\"t\":\(now),\"n\":\(chunk.count),\"state\":\"\(app.state.rawValue)\"}")
        if app.state != .active { await app.finishedProcessing() }
    }
    record.line("{\"kind\":\"closed\",\"reason\":\"\(session.closeReason ?? "")\"}")
}

let options = Options.parse(Array(CommandLine.arguments.dropFirst()))
do {
    if let node = options.direct {
        try direct(node: node, bytes: options.bytes)
    } else if options.app {
        try await runApp(options)
    } else {
        _ = Options.parse(["--help"])
    }
} catch {
    FileHandle.standardError.write("vigil-accessory-bench: \(error)\n".data(using: .utf8)!)
    exit(1)
}
