import ArgumentParser
import Foundation
import VigilKit

/// `vigilctl accessory open`: a terminal onto an accessory, for manual
/// hardware work. stdin goes to the device, each chunk's write awaited before
/// the next is read, so a fast producer on stdin is held back at the device's
/// pace; the device's bytes go to stdout raw. Ends at EOF on stdin, once every
/// write is done (exit 0), or when the session ends otherwise (the reason on
/// stderr, exit 1).
struct AccessoryOpen: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "open",
        abstract: "A terminal onto an accessory: stdin to the device, the device to stdout."
    )

    @OptionGroup var options: GlobalOptions

    @Argument(help: "The accessory's connection id, as `vigilctl accessories` lists it.")
    var connectionID: UInt64

    @Option(name: .customLong("protocol"), help: "One of the accessory's protocol strings.")
    var protocolString: String

    @Option(help: ArgumentHelp("Line settings overriding the accessory's.", valueName: "\"9600 8N1\""))
    var lineSettings: String?

    private enum Outcome: Sendable {
        case inputEnded
        case writeFailed(String)
        case closed(String)
        case outputEnded
        case gaveUpWaiting
    }

    func run() async throws {
        let client = try await options.connect()
        let session = try await client.openSession(connectionID: connectionID, protocol: protocolString, lineSettings: lineSettings)
        let accessory = session.accessory
        note("session \(session.id) with \(accessory.name) at \(accessory.deviceNode) for \(protocolString) (\(lineSettings ?? accessory.lineSettings)); EOF (Ctrl-D) ends it")

        let (outcomes, report) = AsyncStream.makeStream(of: Outcome.self)
        // Returns why the daemon closed the session, nil when it ended otherwise.
        let printing = Task { () -> String? in
            for await output in session.output {
                switch output {
                case let .data(bytes): StandardStreams.writeOut(bytes)
                case let .closed(reason):
                    report.yield(.closed(reason))
                    return reason
                case let .waitingToReopen(reason):
                    note("session \(session.id) waits for its accessory to return: \(reason)")
                }
            }
            report.yield(.outputEnded)
            return nil
        }
        Task {
            while let chunk = await StandardStreams.readIn() {
                do {
                    try await client.write(chunk, session: session.id)
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
            do { try await client.closeSession(session.id) } catch { closeError = error }
            if let reason = await printing.value { fail("session \(session.id) closed: \(reason)") }
            if let closeError { throw closeError }
        case let .writeFailed(error)?:
            // A write fails because the session ended; its reason follows at once.
            Task {
                try? await Task.sleep(for: .milliseconds(500))
                report.yield(.gaveUpWaiting)
            }
            while let next = await iterator.next() {
                if case let .closed(reason) = next { fail("session \(session.id) closed: \(reason)") }
                if case .gaveUpWaiting = next { break }
            }
            fail("write failed: \(error)")
        case let .closed(reason)?:
            fail("session \(session.id) closed: \(reason)")
        case .outputEnded?, .gaveUpWaiting?, nil:
            fail("session \(session.id) ended")
        }
    }

    private func note(_ message: String) {
        FileHandle.standardError.write(Data("vigilctl: \(message)\n".utf8))
    }

    private func fail(_ message: String) -> Never {
        note(message)
        Foundation.exit(1)
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
