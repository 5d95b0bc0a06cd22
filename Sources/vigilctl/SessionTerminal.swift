import FoundationEssentials
import Dispatch
import Glibc
import VigilKit

/// A terminal onto a session, for `accessory open` and `ble l2cap open` /
/// `listen`: stdin goes to the session, each chunk's write awaited before the
/// next is read, so a fast producer on stdin is held back at the device's
/// pace; the session's bytes go to stdout raw. Ends at EOF on stdin, once
/// every write is done and the session closed (exit 0, or the close's error
/// rethrown), or when the session ends otherwise (the reason on stderr,
/// exit 1).
struct SessionTerminal {
    let client: ControlClient
    let session: Int
    let output: AsyncStream<ControlSession.Output>
    /// How messages name it: "session 4", "channel".
    let name: String
    /// What a session waiting to reopen waits for: "its accessory to return".
    let waitsFor: String

    private enum Outcome: Sendable {
        case inputEnded
        case writeFailed(String)
        case closed(String)
        case outputEnded
        case gaveUpWaiting
    }

    func run() async throws {
        let (outcomes, report) = AsyncStream.makeStream(of: Outcome.self)
        let (output, name, waitsFor) = (output, name, waitsFor)
        // Returns why the daemon closed the session, nil when it ended otherwise.
        let printing = Task { () -> String? in
            for await item in output {
                switch item {
                case let .data(bytes): StandardStreams.writeOut(bytes)
                case let .closed(reason):
                    report.yield(.closed(reason))
                    return reason
                case let .waitingToReopen(reason):
                    Self.note("\(name) waits for \(waitsFor): \(reason)")
                case let .lines(lines, changed):
                    Self.note("\(name): \(changed.joined(separator: ", ")) changed; lines now \(AccessoryOpen.describe(lines))")
                }
            }
            report.yield(.outputEnded)
            return nil
        }
        let (client, session) = (client, session)
        Task {
            while let chunk = await StandardStreams.readIn() {
                do {
                    try await client.write(chunk, session: session)
                } catch {
                    report.yield(.writeFailed("\(error)"))
                    return
                }
            }
            report.yield(.inputEnded)
        }

        var iterator = outcomes.makeAsyncIterator()
        switch await iterator.next() {
        case .inputEnded?:
            // Closing finishes the output: what the device sent before is printed
            // first. The session may have ended meanwhile; then its reason counts.
            var closeError: (any Error)?
            do { try await client.closeSession(session) } catch { closeError = error }
            if let reason = await printing.value { Self.fail("\(name) closed: \(reason)") }
            if let closeError { throw closeError }
        case let .writeFailed(error)?:
            // A write fails because the session ended; its reason follows at once.
            Task {
                try? await Task.sleep(for: .milliseconds(500))
                report.yield(.gaveUpWaiting)
            }
            while let next = await iterator.next() {
                if case let .closed(reason) = next { Self.fail("\(name) closed: \(reason)") }
                if case .gaveUpWaiting = next { break }
            }
            Self.fail("write failed: \(error)")
        case let .closed(reason)?:
            Self.fail("\(name) closed: \(reason)")
        case .outputEnded?, .gaveUpWaiting?, nil:
            Self.fail("\(name) ended")
        }
    }

    static func note(_ message: String) {
        writeStandardError("vigilctl: \(message)\n")
    }

    static func fail(_ message: String) -> Never {
        note(message)
        Glibc.exit(1)
    }
}

/// Raw stdin and stdout, unbuffered. Reads block a thread of their own, never
/// one of the cooperative pool; one read at a time, each when asked for.
enum StandardStreams {
    private static let reader = DispatchQueue(label: "vigilctl-stdin")

    /// The next bytes from stdin; nil at EOF (or on a read error).
    static func readIn() async -> [UInt8]? {
        await withCheckedContinuation { continuation in
            reader.async {
                var buffer = [UInt8](repeating: 0, count: 64 * 1024)
                var count: Int
                repeat {
                    count = buffer.withUnsafeMutableBytes { read(STDIN_FILENO, $0.baseAddress, $0.count) }
                } while count < 0 && errno == EINTR
                continuation.resume(returning: count > 0 ? Array(buffer[0..<count]) : nil)
            }
        }
    }

    /// Writes every byte to stdout.
    static func writeOut(_ bytes: [UInt8]) {
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeBytes { write(STDOUT_FILENO, $0.baseAddress! + offset, $0.count - offset) }
            if written < 0 && errno == EINTR { continue }
            guard written > 0 else { return }
            offset += written
        }
    }
}
