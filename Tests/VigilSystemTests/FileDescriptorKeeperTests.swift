import Foundation
import Glibc
import Testing
@testable import VigilSystem

/// The port keeper's protocol, with the keeper's own loop on a thread of the
/// test and a pipe standing in for a port.
@Suite struct FileDescriptorKeeperTests {
    private func scratch() throws -> String {
        let directory = NSTemporaryDirectory() + "vigil-keeper-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        return directory
    }

    /// Starts a keeper on a thread; `ended` is signalled when its loop returns.
    private func startKeeper(_ listener: Int32, ended: DispatchSemaphore, idleSeconds: Int32 = 30) {
        let copy = dup(listener)  // `connect` closes its own after `start`
        Thread.detachNewThread {
            _ = FileDescriptorKeeper.run(listener: copy, idleSeconds: idleSeconds)
            close(copy)
            ended.signal()
        }
    }

    @Test func whatADaemonLeftIsGivenToTheNextWithItsUnreadBytes() throws {
        let directory = try scratch()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/keeper.sock"
        let ended = DispatchSemaphore(value: 0)
        var starts = 0
        let first = try FileDescriptorKeeper.connect(path: path) { listener in
            starts += 1
            startKeeper(listener, ended: ended)
        }
        var ends: [Int32] = [0, 0]
        #expect(pipe(&ends) == 0)
        try first.keep(ends[0], name: "session-7")
        try first.keep(ends[0], name: "session-8")
        try first.drop(name: "session-8")
        #expect(write(ends[1], "unread", 6) == 6)
        close(ends[0])
        first.close()  // the daemon dies; its last requests may still be in flight

        let second = try FileDescriptorKeeper.connect(path: path) { _ in starts += 1 }
        #expect(starts == 1, "the second daemon found the first keeper")
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
        close(ends[1])
    }

    @Test func aKeeperLeftHoldingNothingEnds() throws {
        let directory = try scratch()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let ended = DispatchSemaphore(value: 0)
        let daemon = try FileDescriptorKeeper.connect(path: directory + "/keeper.sock") { startKeeper($0, ended: ended) }
        _ = try daemon.list()  // connected and served
        daemon.close()
        #expect(ended.wait(timeout: .now() + 10) == .success)
    }

    @Test func withNoDaemonAHeldDescriptorThatHangsUpIsLetGo() throws {
        let directory = try scratch()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let ended = DispatchSemaphore(value: 0)
        let daemon = try FileDescriptorKeeper.connect(path: directory + "/keeper.sock") { startKeeper($0, ended: ended) }
        var ends: [Int32] = [0, 0]
        #expect(pipe(&ends) == 0)
        try daemon.keep(ends[0], name: "session-1")
        close(ends[0])
        _ = try daemon.list()  // the keep is served
        daemon.close()  // the daemon dies; the keeper holds the "port"
        #expect(ended.wait(timeout: .now() + 0.5) == .timedOut, "it keeps a live port for the next daemon")
        close(ends[1])  // the device goes: the held end hangs up
        #expect(ended.wait(timeout: .now() + 10) == .success, "let go of, and nothing left to keep")
    }

    @Test func badRequestsAreIgnoredAndTheKeeperServesOn() throws {
        let directory = try scratch()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let ended = DispatchSemaphore(value: 0)
        let daemon = try FileDescriptorKeeper.connect(path: directory + "/keeper.sock") { startKeeper($0, ended: ended) }
        var ends: [Int32] = [0, 0]
        #expect(pipe(&ends) == 0)
        try daemon.keep(ends[0], name: String(repeating: "x", count: 400))  // longer than any request: refused
        try daemon.keep(ends[0], name: "")  // no name
        try daemon.drop(name: "never-kept")
        try daemon.keep(ends[0], name: "good")
        #expect(Array(try daemon.list().keys) == ["good"])
        daemon.quit()
        #expect(ended.wait(timeout: .now() + 10) == .success)
        close(ends[0])
        close(ends[1])
    }
}
