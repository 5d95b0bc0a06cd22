import Foundation
import Glibc
import VigilKit
import VigilSerial

// The reading side of scripts/bench-accessories (see docs/performance.md,
// "Accessories"). Prints figures as JSON lines; asserts nothing.
//
//   vigil-accessory-bench --app --bytes N --bursts B --burst-bytes S --record FILE [--protocol P]
//       launched by vigild: opens a session on the accessory's protocol and
//       reads, in this order, through AccessorySession:
//         1. throughput: N pattern bytes (one "throughput" record);
//         2. bursts: B bursts of S pattern bytes, the pattern restarting at 0
//            for the phase (a "burst" record per burst, then "bursts"); in
//            the background it calls finishedProcessing() after each chunk,
//            so it is suspended between bursts and each burst wakes it;
//         3. latency: every later chunk is a sample ("sample" records), the
//            clock read first thing in the handler.
//   vigil-accessory-bench --direct /dev/ttyACM0 --bytes N [--burst-bytes S]
//       run inside the umockdev testbed: reads N pattern bytes straight from
//       the node with SerialPort; prints "ready", a "burst" line at the end of
//       each burst of S bytes (if given), then the "throughput" line.

/// Byte `i` of the stream the device writes: a period (251) prime to every chunk size.
@inline(__always) func pattern(_ index: Int) -> UInt8 { UInt8(truncatingIfNeeded: index % 251) }

struct Options {
    var direct: String?
    var app = false
    var bytes = 32 << 20
    var bursts = 0
    var burstBytes = 0
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
            case "--bursts": options.bursts = Int(arguments.popFirst() ?? "") ?? options.bursts
            case "--burst-bytes": options.burstBytes = Int(arguments.popFirst() ?? "") ?? options.burstBytes
            case "--record": options.record = arguments.popFirst() ?? ""
            case "--protocol": options.protocolString = arguments.popFirst() ?? options.protocolString
            default:
                FileHandle.standardError.write(
                    ("usage: vigil-accessory-bench (--app --record FILE [--bursts B] | --direct NODE) [--bytes N] "
                     + "[--burst-bytes S] [--protocol P]\n").data(using: .utf8)!)
                exit(2)
            }
        }
        return options
    }
}

/// Counts bytes, stamps the first and last, and checks every byte against
/// `pattern`. With `burstBytes`, it also stamps the first and last byte of
/// each burst (byte ranges of that size) and reports each burst as it ends.
struct Tally {
    var kind = "throughput"
    var burstBytes = 0
    var count = 0
    var first: UInt64 = 0
    var last: UInt64 = 0
    var mismatches = 0
    var chunks = 0
    var burstFirst: UInt64 = 0
    var burstMismatches = 0
    var burstChunks = 0

    /// Adds a chunk; returns the JSON line of each burst this chunk completed.
    mutating func add(_ bytes: UnsafeRawBufferPointer, at now: UInt64) -> [String] {
        if count == 0 { first = now }
        last = now
        chunks += 1
        var ended: [String] = []
        var offset = 0
        while offset < bytes.count {
            var length = bytes.count - offset
            if burstBytes > 0 {
                let into = count % burstBytes
                if into == 0 {
                    burstFirst = now
                    burstMismatches = 0
                    burstChunks = 0
                }
                burstChunks += 1
                length = min(length, burstBytes - into)
            }
            var bad = 0
            var index = count
            for byte in UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + length]) {
                if byte != pattern(index) { bad += 1 }
                index += 1
            }
            mismatches += bad
            burstMismatches += bad
            count = index
            offset += length
            if burstBytes > 0 && count % burstBytes == 0 {
                ended.append("{\"kind\":\"burst\",\"k\":\(count / burstBytes - 1),\"first\":\(burstFirst),\"last\":\(now),"
                    + "\"chunks\":\(burstChunks),\"mismatches\":\(burstMismatches)}")
            }
        }
        return ended
    }

    var json: String {
        "{\"kind\":\"\(kind)\",\"bytes\":\(count),\"first\":\(first),\"last\":\(last),\"chunks\":\(chunks),\"mismatches\":\(mismatches)}"
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

func direct(node: String, bytes: Int, burstBytes: Int) throws {
    let port = try SerialPort.open(path: node)
    say("ready")
    var tally = Tally(burstBytes: burstBytes)
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)
    defer { buffer.deallocate() }
    while tally.count < bytes {
        switch try port.read(into: buffer) {
        case let .bytes(count):
            let wanted = min(count, bytes - tally.count)
            for line in tally.add(UnsafeRawBufferPointer(rebasing: buffer[0..<wanted]), at: MonotonicClock.now) {
                say(line)
            }
        case .wouldBlock:
            var poller = pollfd(fd: port.fd, events: Int16(POLLIN), revents: 0)
            _ = poll(&poller, 1, 10_000)
        case .hangup:
            say("{\"kind\":\"error\",\"error\":\"hangup after \(tally.count) bytes\"}")
            exit(1)
        }
    }
    // The reader's own CPU, to set against vigild's and the app's (the bench prints both).
    var usage = rusage()
    getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
    let cpu = Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
    say(String(tally.json.dropLast()) + ",\"cpuSeconds\":\(cpu)}")
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
    var throughput = Tally()
    let burstTotal = options.bursts * options.burstBytes
    var bursts = Tally(kind: "bursts", burstBytes: options.burstBytes)
    var sampleMismatches = 0
    for await chunk in session.bytes {
        let now = MonotonicClock.now
        var rest = chunk[...]
        if throughput.count < options.bytes {
            let wanted = min(rest.count, options.bytes - throughput.count)
            _ = rest.prefix(wanted).withUnsafeBytes { throughput.add($0, at: now) }
            rest = rest.dropFirst(wanted)
            if throughput.count >= options.bytes { record.line(throughput.json) }
            if rest.isEmpty { continue }
        }
        if bursts.count < burstTotal {
            let wanted = min(rest.count, burstTotal - bursts.count)
            let ended = rest.prefix(wanted).withUnsafeBytes { bursts.add($0, at: now) }
            for line in ended { record.line(line) }
            rest = rest.dropFirst(wanted)
            if bursts.count >= burstTotal { record.line(bursts.json) }
            // A logger: it has stored what woke it, so it may be suspended.
            if app.state != .active { await app.finishedProcessing() }
            if rest.isEmpty { continue }
        }
        // Latency samples: one byte (1) each; the clock was read first thing.
        sampleMismatches += rest.count(where: { $0 != 1 })
        record.line("{\"kind\":\"sample\",\"t\":\(now),\"n\":\(rest.count),\"mismatches\":\(sampleMismatches),"
            + "\"state\":\"\(app.state.rawValue)\"}")
        if app.state != .active { await app.finishedProcessing() }
    }
    record.line("{\"kind\":\"closed\",\"reason\":\"\(session.closeReason ?? "")\"}")
}

let options = Options.parse(Array(CommandLine.arguments.dropFirst()))
do {
    if let node = options.direct {
        try direct(node: node, bytes: options.bytes, burstBytes: options.burstBytes)
    } else if options.app {
        try await runApp(options)
    } else {
        _ = Options.parse(["--help"])
    }
} catch {
    FileHandle.standardError.write("vigil-accessory-bench: \(error)\n".data(using: .utf8)!)
    exit(1)
}
