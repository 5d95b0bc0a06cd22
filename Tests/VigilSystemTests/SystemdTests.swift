import Glibc
import Testing
import VigilSystem

/// The systemd protocols without systemd: notifications to a datagram socket
/// the test binds, the watchdog on a real loop, a listening socket passed as
/// by socket activation, journal streams to a listener playing journald.
/// vigild's use of them is tested in Tests/python/test_systemd.py.
@Suite struct SystemdTests {
    // MARK: Environment

    @Test func parsesWhatSystemdPasses() throws {
        let parsed = try SystemdEnvironment.parse([
            "NOTIFY_SOCKET": "@/org/freedesktop/systemd1/notify/42", "WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "77",
            "LISTEN_PID": "77", "LISTEN_FDS": "2", "LISTEN_FDNAMES": "vigild.socket:other",
        ], pid: 77)
        #expect(parsed == SystemdEnvironment(
            notifySocket: "@/org/freedesktop/systemd1/notify/42", watchdogInterval: .seconds(30),
            listenFDs: [.init(fd: 3, name: "vigild.socket"), .init(fd: 4, name: "other")]))
        #expect(try SystemdEnvironment.parse([:], pid: 77) == SystemdEnvironment())
    }

    @Test func ignoresWhatWasMeantForAnotherProcess() throws {
        let inherited = try SystemdEnvironment.parse(
            ["WATCHDOG_USEC": "1000", "WATCHDOG_PID": "1", "LISTEN_PID": "1", "LISTEN_FDS": "1"], pid: 77)
        #expect(inherited.watchdogInterval == nil)
        #expect(inherited.listenFDs.isEmpty)
        // sd_listen_fds(3) requires LISTEN_PID; sd_watchdog_enabled(3) does not require WATCHDOG_PID.
        let unnamed = try SystemdEnvironment.parse(["WATCHDOG_USEC": "1000", "LISTEN_FDS": "1"], pid: 77)
        #expect(unnamed.watchdogInterval == .milliseconds(1))
        #expect(unnamed.listenFDs.isEmpty)
    }

    @Test(arguments: [
        (["WATCHDOG_USEC": "0"], "WATCHDOG_USEC='0' is not a positive number of microseconds"),
        (["WATCHDOG_USEC": "10", "WATCHDOG_PID": "me"], "WATCHDOG_PID='me' is not a process id"),
        (["NOTIFY_SOCKET": "notify"], "NOTIFY_SOCKET='notify' is neither an absolute path nor an abstract socket name (@name)"),
        (["LISTEN_FDS": "-1", "LISTEN_PID": "77"], "LISTEN_FDS='-1' is not a number of descriptors"),
        (["LISTEN_FDS": "2", "LISTEN_PID": "77", "LISTEN_FDNAMES": "one"], "LISTEN_FDNAMES='one' names 1 descriptors, LISTEN_FDS says 2"),
    ])
    func refusesValuesThatCannotBeRight(environment: [String: String], message: String) {
        #expect(throws: SystemdEnvironmentError.self) { try SystemdEnvironment.parse(environment, pid: 77) }
        do {
            _ = try SystemdEnvironment.parse(environment, pid: 77)
        } catch {
            #expect(error.description == message)
        }
    }

    // MARK: Notifications

    @Test func notifiesAPathSocketInOneDatagram() async throws {
        try await withTemporaryDirectory { directory in
            let receiver = try DatagramReceiver(path: directory + "/notify")
            let notifier = try SystemdNotifier(socket: directory + "/notify")
            try notifier.send([.ready, .status("2 apps\n1 session")])
            #expect(receiver.receive() == "READY=1\nSTATUS=2 apps 1 session\n")
            try notifier.send(.reloading(MonotonicInstant(nanoseconds: 5_000_000)))
            #expect(receiver.receive() == "RELOADING=1\nMONOTONIC_USEC=5000\n")
            try notifier.send(.stopping)
            #expect(receiver.receive() == "STOPPING=1\n")
        }
    }

    @Test func notifiesAnAbstractSocket() throws {
        let name = uniqueName("vigil-notify")
        let receiver = try DatagramReceiver(abstract: name)
        try SystemdNotifier(socket: "@" + name).send(.ready)
        #expect(receiver.receive() == "READY=1\n")
    }

    @Test func aMissingManagerIsAnErrorNamingTheSocket() throws {
        let notifier = try SystemdNotifier(socket: "/nonexistent/notify")
        #expect { try notifier.send(.ready) } throws: { ($0 as? SystemError)?.path == "/nonexistent/notify" }
    }

    @Test func watchdogKeepAlivesComeFromTheLoopUntilStopped() async throws {
        try await withTemporaryDirectory { directory in
            let receiver = try DatagramReceiver(path: directory + "/notify")
            let notifier = try SystemdNotifier(socket: directory + "/notify")
            try await withRunningLoop { loop in
                let watchdog = notifier.keepAlive(on: loop, interval: .milliseconds(20))
                #expect(watchdog.period == .milliseconds(10))
                for _ in 0..<3 { #expect(receiver.receive() == "WATCHDOG=1\n") }
                // A loop that is stuck sends nothing: block it, drain, and nothing comes.
                let release = Locked(false), blocking = Locked(false)
                loop.execute {
                    blocking.withLock { $0 = true }
                    while !release.withLock({ $0 }) { usleep(1000) }
                }
                #expect(await eventually { blocking.withLock { $0 } })
                _ = receiver.drain()
                try await Task.sleep(for: .milliseconds(100))
                #expect(receiver.drain().isEmpty, "a blocked loop sent keep-alives")
                release.withLock { $0 = true }
                #expect(receiver.receive() == "WATCHDOG=1\n", "keep-alives resume with the loop")
                let stopped = Locked(false)
                loop.execute { watchdog.stop(); stopped.withLock { $0 = true } }
                #expect(await eventually { stopped.withLock { $0 } })
                _ = receiver.drain()
                try await Task.sleep(for: .milliseconds(100))
                #expect(receiver.drain().isEmpty, "keep-alives after stop()")
            }
        }
    }

    // MARK: Socket activation

    @Test func adoptsAPassedListenerAndLeavesItsFile() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory + "/vigild.sock"
            let fd = try boundSocket(path, listening: true)
            let listener = try UnixListener.adopt(fd: fd)
            #expect(listener.path == path)
            #expect(fcntl(fd, F_GETFL) & O_NONBLOCK != 0)
            #expect(fcntl(fd, F_GETFD) & FD_CLOEXEC != 0)
            #expect(try listener.accept() == nil)
            let client = try UnixStream.connect(path: path)
            #expect(try listener.accept() != nil)
            client.close()
            listener.close()
            #expect(access(path, F_OK) == 0, "the socket file is the binder's")
        }
    }

    @Test func refusesAPassedDescriptorThatCannotListen() async throws {
        try await withTemporaryDirectory { directory in
            let notListening = try boundSocket(directory + "/a.sock", listening: false)
            defer { close(notListening) }
            #expect { try UnixListener.adopt(fd: notListening) } throws: {
                "\($0)" == "the passed descriptor \(notListening) cannot be the listening socket: it does not listen"
            }
            var pipe: [Int32] = [-1, -1]
            #expect(Glibc.pipe(&pipe) == 0)
            defer { close(pipe[0]); close(pipe[1]) }
            #expect { try UnixListener.adopt(fd: pipe[0]) } throws: { ($0 as? SystemError)?.errno == .notSocket }
        }
    }

    // MARK: Journal

    @Test func journalStreamSendsSdJournalStreamFdsHeader() async throws {
        try await withTemporaryDirectory { directory in
            let journald = try UnixListener.bind(path: directory + "/stdout")
            let fd = try Journal.openStream(identifier: "org.example.app", socket: directory + "/stdout")
            #expect(fcntl(fd, F_GETFD) & FD_CLOEXEC != 0)
            _ = "hello\n".withCString { write(fd, $0, 6) }
            close(fd)
            let stream = try #require(try journald.accept())
            try stream.setNonBlocking(false)
            var received: [UInt8] = []
            while let chunk = try stream.read(maxBytes: 4096), !chunk.isEmpty { received += chunk }
            #expect(String(decoding: received, as: UTF8.self) == "org.example.app\n\n6\n1\n0\n0\n0\nhello\n")
            #expect { try Journal.openStream(identifier: "two\nlines", socket: directory + "/stdout") } throws: { _ in true }
        }
    }

    @Test func journalConnectionIsTheStreamsDeviceAndInode() throws {
        let (left, right) = try UnixStream.pair()
        let variable = try #require(Journal.streamVariable(for: left.fd))
        #expect(Journal.isConnected(fd: left.fd, journalStream: variable))
        #expect(!Journal.isConnected(fd: right.fd, journalStream: variable), "another socket")
        #expect(!Journal.isConnected(fd: left.fd, journalStream: nil))
        #expect(!Journal.isConnected(fd: left.fd, journalStream: "garbage"))
    }
}

/// A bound Unix stream socket (listening if asked), as systemd would pass one.
private func boundSocket(_ path: String, listening: Bool) throws -> Int32 {
    let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
    let bound = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
    }
    #expect(bound == 0)
    if listening { #expect(listen(fd, 4) == 0) }
    return fd
}

/// The service manager's end: a datagram socket, read with a timeout.
private final class DatagramReceiver {
    let fd: Int32

    init(path: String) throws {
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
        try bind(&address, length: socklen_t(MemoryLayout<sockaddr_un>.size))
    }

    init(abstract name: String) throws {
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = [0] + Array(name.utf8)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        try bind(&address, length: socklen_t(MemoryLayout<sa_family_t>.size + bytes.count))
    }

    private func bind(_ address: inout sockaddr_un, length: socklen_t) throws {
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(fd, $0, length) }
        }
        #expect(result == 0, "bind: \(String(cString: strerror(errno)))")
    }

    deinit { close(fd) }

    /// The next datagram, or nil after 10 s.
    func receive() -> String? {
        var poll = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard Glibc.poll(&poll, 1, 10_000) == 1 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = recv(fd, &buffer, buffer.count, 0)
        return count < 0 ? nil : String(decoding: buffer[..<count], as: UTF8.self)
    }

    /// Every datagram waiting now.
    func drain() -> [String] {
        var all: [String] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = recv(fd, &buffer, buffer.count, Int32(MSG_DONTWAIT))
            guard count >= 0 else { return all }
            all.append(String(decoding: buffer[..<count], as: UTF8.self))
        }
    }
}
