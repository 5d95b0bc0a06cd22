import Foundation
import Glibc
import Testing
@testable import VigilSystem

/// The port keeper's protocol, with the keeper's own loop on a thread of the
/// test and a pipe standing in for a port.
@Suite struct FileDescriptorKeeperTests {
    /// A scratch folder, a keeper on a thread (`ended` is signalled when its
    /// loop returns) and a daemon connected to it.
    private func withKeeper(
        _ body: (_ daemon: FileDescriptorKeeper, _ ended: DispatchSemaphore, _ path: String) throws -> Void
    ) throws {
        let directory = NSTemporaryDirectory() + "vigil-keeper-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/keeper.sock"
        let ended = DispatchSemaphore(value: 0)
        let daemon = try FileDescriptorKeeper.connect(path: path) { listener in
            let copy = dup(listener)  // `connect` closes its own after `start`
            Thread.detachNewThread {
                _ = FileDescriptorKeeper.run(listener: copy, idleSeconds: 30)
                close(copy)
                ended.signal()
            }
        }
        try body(daemon, ended, path)
    }

    /// A pipe: its read end stands in for a port, its write end for the device.
    private func device() -> (port: Int32, device: Int32) {
        var ends: [Int32] = [0, 0]
        #expect(pipe(&ends) == 0)
        return (ends[0], ends[1])
    }

    @Test func whatADaemonLeftIsGivenToTheNextWithItsUnreadBytes() throws {
        try withKeeper { first, ended, path in
            let (port, device) = device()
            defer { close(device) }
            try first.keep(port, name: "session-7")
            try first.keep(port, name: "session-8")
            try first.drop(name: "session-8")
            #expect(write(device, "unread", 6) == 6)
            close(port)
            first.close()  // the daemon dies; its last requests may still be in flight

            let second = try FileDescriptorKeeper.connect(path: path) { _ in Issue.record("a second keeper was started") }
            let kept = try second.list()
            #expect(Array(kept.keys) == ["session-7"])
            let fd = try #require(kept["session-7"])
            var buffer = [UInt8](repeating: 0, count: 16)
            #expect(read(fd, &buffer, 16) == 6)
            #expect(String(decoding: buffer[0..<6], as: UTF8.self) == "unread")
            close(fd)

            try second.drop(name: "session-7")
            #expect(try second.list().isEmpty)
            second.quit()
            #expect(ended.wait(timeout: .now() + 10) == .success, "the keeper ends when told to")
        }
    }

    @Test func aKeeperLeftHoldingNothingEnds() throws {
        try withKeeper { daemon, ended, _ in
            _ = try daemon.list()  // connected and served
            daemon.close()
            #expect(ended.wait(timeout: .now() + 10) == .success)
        }
    }

    @Test func withNoDaemonAHeldDescriptorThatHangsUpIsLetGo() throws {
        try withKeeper { daemon, ended, _ in
            let (port, device) = device()
            try daemon.keep(port, name: "session-1")
            close(port)
            _ = try daemon.list()  // the keep is served
            daemon.close()  // the daemon dies; the keeper holds the "port"
            #expect(ended.wait(timeout: .now() + 0.5) == .timedOut, "it keeps a live port for the next daemon")
            close(device)  // the device goes: the held end hangs up
            #expect(ended.wait(timeout: .now() + 10) == .success, "let go of, and nothing left to keep")
        }
    }

    @Test func badRequestsAreIgnoredAndTheKeeperServesOn() throws {
        try withKeeper { daemon, ended, _ in
            let (port, device) = device()
            defer { close(port); close(device) }
            try daemon.keep(port, name: String(repeating: "x", count: 400))  // longer than any request: refused
            try daemon.keep(port, name: "")  // no name
            try daemon.drop(name: "never-kept")
            try daemon.keep(port, name: "good")
            #expect(Array(try daemon.list().keys) == ["good"])
            daemon.quit()
            #expect(ended.wait(timeout: .now() + 10) == .success)
        }
    }
}
