import Glibc
import Testing
import VigilDBus
import VigilSystem

@Suite(.timeLimit(.minutes(1)))
struct FDPassingTests {
    /// Caller to handler: the handler reads what was written into the pipe.
    @Test func sendsAnFD() async throws {
        try await withConnections { _, server, client in
            try await Echo.export(on: server)
            var fds: [Int32] = [-1, -1]
            #expect(pipe(&fds) == 0)
            let text = Array("through the bus".utf8)
            #expect(write(fds[1], text, text.count) == text.count)
            close(fds[1])
            let reply = try await client.callEcho(server, "ReadFD", [.unixFD(fds[0])])
            close(fds[0])  // libdbus sent a duplicate; ours is still ours
            #expect(reply == [.string("through the bus")])
        }
    }

    /// Handler to caller: the reply's fd is a fresh one, owned by the caller.
    @Test func receivesAnFD() async throws {
        try await withConnections { _, server, client in
            try await Echo.export(on: server)
            let reply = try await client.callEcho(server, "MakePipe", [.string("from the server")])
            let fd = try #require(reply.first?.unixFD)
            #expect(fd >= 0)
            #expect(Echo.readAll(fd) == "from the server")
            close(fd)
        }
    }

    @Test func aClosedFDIsAnErrorNotACrash() async throws {
        try await withConnections { _, server, client in
            try await Echo.export(on: server)
            let error = await errorOf { _ = try await client.callEcho(server, "ReadFD", [.unixFD(987_654)]) }
            #expect(error is DBusError)
        }
    }
}
