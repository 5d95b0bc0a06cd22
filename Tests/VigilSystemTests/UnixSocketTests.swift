import Glibc
import Testing
import VigilSystem

@Suite struct UnixSocketTests {
    @Test func connectAcceptExchangeAndPeerCredentials() async throws {
        try await withTemporaryDirectory { directory in
            // The listener creates the missing parent directory.
            let path = directory + "/run/vigil.sock"
            let listener = try UnixListener.bind(path: path, permissions: 0o660)
            var info = stat()
            #expect(lstat(path, &info) == 0)
            #expect(info.st_mode & 0o777 == 0o660)

            #expect(try listener.accept() == nil)  // non-blocking, nobody waiting
            let client = try UnixStream.connect(path: path)
            let server = try #require(try listener.accept())

            #expect(try server.peerCredentials() == PeerCredentials(
                pid: getpid(), uid: getuid(), gid: getgid(), groups: ProcessCredentials.supplementaryGroups()))
            #expect(try client.peerCredentials().pid == getpid())

            try client.writeAll(Array("hello".utf8))
            #expect(try server.read(maxBytes: 64) == Array("hello".utf8))
            #expect(try server.read(maxBytes: 64) == nil)  // would block, not EOF
            try client.shutdown(.write)
            #expect(try server.read(maxBytes: 64) == [])  // EOF

            listener.close()
            #expect(access(path, F_OK) != 0, "close() removes the socket file")
        }
    }

    @Test func writingToAClosedPeerIsAnErrorNotSIGPIPE() throws {
        let (left, right) = try UnixStream.pair()
        right.close()
        #expect {
            try left.writeAll(Array(repeating: 0, count: 1 << 20))
        } throws: { ($0 as? SystemError)?.errno == .brokenPipe }
    }

    @Test func nonBlockingWriteReportsAFullBufferAsNil() throws {
        let (left, right) = try UnixStream.pair()
        try left.setNonBlocking(true)
        let chunk = [UInt8](repeating: 0, count: 65536)
        var sawFull = false
        for _ in 0..<1000 where !sawFull {
            sawFull = try chunk.withUnsafeBytes { try left.write($0) } == nil
        }
        #expect(sawFull)
        withExtendedLifetime(right) {}
    }

    @Test func staleSocketFileIsReplaced() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory + "/stale.sock"
            try makeStaleSocket(at: path)
            let listener = try UnixListener.bind(path: path)
            _ = try UnixStream.connect(path: path)
            #expect(try listener.accept() != nil)
            listener.close()
        }
    }

    @Test func liveSocketIsRefusedWithAClearError() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory + "/live.sock"
            let first = try UnixListener.bind(path: path)
            #expect(throws: UnixSocketError.addressInUse(path: path)) {
                try UnixListener.bind(path: path)
            }
            #expect(UnixSocketError.addressInUse(path: path).description
                == "address in use: another vigild is running at \(path)")
            // The refused attempt left the live socket in place.
            _ = try UnixStream.connect(path: path)
            first.close()
        }
    }

    @Test func regularFileIsNotReplaced() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory + "/file"
            close(open(path, O_CREAT | O_WRONLY, 0o600))
            #expect(throws: UnixSocketError.notASocket(path: path)) { try UnixListener.bind(path: path) }
            #expect(access(path, F_OK) == 0)
        }
    }

    @Test func connectingToNothingNamesThePath() async throws {
        try await withTemporaryDirectory { directory in
            let missing = directory + "/missing.sock"
            #expect(throws: UnixSocketError.noListener(path: missing, errno: .noSuchFileOrDirectory)) {
                try UnixStream.connect(path: missing)
            }
            let stale = directory + "/stale.sock"
            try makeStaleSocket(at: stale)
            let error = #expect(throws: UnixSocketError.self) { try UnixStream.connect(path: stale) }
            #expect(error?.description.hasPrefix("no daemon listening at \(stale)") == true)
        }
    }

    @Test func tooLongPathIsRejected() {
        let path = "/tmp/" + String(repeating: "x", count: 200)
        #expect(throws: UnixSocketError.pathTooLong(path: path)) { try UnixListener.bind(path: path) }
    }
}

/// What a crashed daemon leaves behind: a bound socket file nobody listens on.
private func makeStaleSocket(at path: String) throws {
    let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
    let result = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
        }
    }
    try #require(result == 0)
}
