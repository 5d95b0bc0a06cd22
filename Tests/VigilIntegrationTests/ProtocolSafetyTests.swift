import Foundation
import Glibc
import Testing
import VigilKit
import VigilSystem

extension Integration {
    @Suite("who may say what on the socket")
    struct ProtocolSafety {
        /// 9. The daemon identifies peers itself: the test process is no app, and a
        /// process inside an app's cgroup may neither control the daemon nor claim another app.
        @Test(needsCgroups) func peersCannotActForAnAppTheyAreNot() async {
            let appA = "org.vigil.test.alpha"
            let appB = "org.vigil.test.beta"
            await DaemonHarness.run(apps: [AppSpec(appA), AppSpec(appB)]) { h in
                // The test process is in no app's cgroup.
                for claim in [nil, appA] {
                    let raw = try RawConnection(path: h.socketPath)
                    try raw.hello(role: "app", app: claim)
                    let answer = try raw.readUntilClosed()
                    await h.expect(answer.first?.code == "unauthorized" && answer.count == 1 && raw.sawEndOfStream,
                                   "hello as app \(claim ?? "(no id)") from the test process: \(answer), closed \(raw.sawEndOfStream)")
                }

                let pid = try await h.launchActive(appA)
                guard let group = h.cgroup(appA), let mount = Cgroup.unifiedMountPoint() else { try await h.fail("no cgroup for \(appA)") }
                let relative = String(group.path.dropFirst(mount.count))

                // Inside A's cgroup: control is refused, and so is claiming to be B.
                let control = try await PeerHelper.run(
                    in: group, relativePath: relative, socket: h.socketPath, directory: h.directory,
                    hello: #"{"type":"hello","versions":[1],"role":"control","client":"intruder"}"#)
                await h.expect(control.code == "unauthorized" && control.closed,
                               "control hello from inside \(appA)'s cgroup: \(control.output)")
                let impostor = try await PeerHelper.run(
                    in: group, relativePath: relative, socket: h.socketPath, directory: h.directory,
                    hello: #"{"type":"hello","versions":[1],"role":"app","app":"\#(appB)","client":"intruder"}"#)
                await h.expect(impostor.code == "unauthorized" && impostor.closed,
                               "hello as \(appB) from inside \(appA)'s cgroup: \(impostor.output)")

                // A itself is undisturbed, and B was never started.
                let accepted = try await h.wake(appA, payload: "still-here")
                let event = try await h.waitForEvent(appA, seq: accepted.seq)
                await h.expect(event.pid == pid, "\(appA)'s event handled by pid \(event.pid), not \(pid)")
                let b = try await h.info(appB)
                await h.expect(b.state == .notRunning, "\(appB) is \(b.state)")
                let status = try await h.status()
                await h.expect(status.pid == h.daemonPid, "status from pid \(status.pid)")
            }
        }

        /// 10. Malformed and oversized frames: an error, then that connection (and only
        /// that one) is closed.
        @Test func badFramesCloseOnlyTheirConnection() async {
            await DaemonHarness.run(apps: []) { h in
                let before = try await h.status()
                struct Case {
                    var name: String
                    var helloFirst: Bool
                    var bytes: [UInt8]
                    var code: String
                }
                func frame(_ header: String, body: [UInt8] = []) -> [UInt8] {
                    RawConnection.prefix(header: UInt32(header.utf8.count), body: UInt32(body.count)) + Array(header.utf8) + body
                }
                let cases = [
                    Case(name: "empty header (H = 0)", helloFirst: true, bytes: RawConnection.prefix(header: 0, body: 0), code: "malformedFrame"),
                    Case(name: "header not JSON", helloFirst: true, bytes: frame("this is not json"), code: "malformedFrame"),
                    Case(name: "header without type", helloFirst: true, bytes: frame(#"{"id":1}"#), code: "malformedFrame"),
                    Case(name: "header a JSON array", helloFirst: true, bytes: frame(#"[1,2,3]"#), code: "malformedFrame"),
                    // Only the prefix is sent: the limit is checked before the rest is read.
                    Case(name: "header over 64 KiB", helloFirst: true, bytes: RawConnection.prefix(header: 65537, body: 0), code: "frameTooLarge"),
                    Case(name: "body over 1 MiB", helloFirst: true, bytes: RawConnection.prefix(header: 20, body: 1_048_577), code: "frameTooLarge"),
                    Case(name: "oversized before hello", helloFirst: false, bytes: RawConnection.prefix(header: 0x7fff_ffff, body: 0), code: "frameTooLarge"),
                    Case(name: "no hello", helloFirst: false, bytes: frame(#"{"type":"status","id":1}"#), code: "handshakeRequired"),
                    Case(name: "unsupported version", helloFirst: false, bytes: frame(#"{"type":"hello","versions":[99],"role":"control"}"#), code: "unsupportedVersion"),
                ]
                // A bystander connected the whole time.
                let bystander = try RawConnection(path: h.socketPath)
                try bystander.hello(role: "control")
                await h.expect(try bystander.next()?.type == "welcome", "the bystander was not welcomed")

                for (index, test) in cases.enumerated() {
                    let raw = try RawConnection(path: h.socketPath)
                    if test.helloFirst {
                        try raw.hello(role: "control")
                        let welcome = try raw.next()
                        await h.expect(welcome?.type == "welcome", "\(test.name): hello answered with \(welcome.map(\.description) ?? "end of stream")")
                    }
                    try raw.send(test.bytes)
                    let answer = try raw.readUntilClosed()
                    await h.expect(answer.count == 1 && answer.first?.type == "error" && answer.first?.code == test.code,
                                   "\(test.name): expected one error \(test.code) then close, got \(answer)")
                    await h.expect(raw.sawEndOfStream, "\(test.name): the connection was not closed")

                    // Others are unaffected: the bystander, the VigilKit client, a new connection.
                    try bystander.send(header: #"{"type":"status","id":\#(index + 10)}"#)
                    let reply = try bystander.next()
                    await h.expect(reply?.type == "reply" && reply?.id == index + 10, "\(test.name): bystander got \(reply.map(\.description) ?? "end of stream")")
                    let status = try await h.status()
                    await h.expect(status.pid == before.pid, "\(test.name): status now from pid \(status.pid)")
                }

                // A request error that is not fatal leaves the connection open.
                try bystander.send(header: #"{"type":"noSuchThing","id":99}"#)
                let unknown = try bystander.next()
                await h.expect(unknown?.code == "unknownMessage" && unknown?.id == 99, "unknown request answered \(unknown.map(\.description) ?? "end of stream")")
                try bystander.send(header: #"{"type":"wake","id":100,"app":"org.vigil.test.nobody"}"#)
                let unknownApp = try bystander.next()
                await h.expect(unknownApp?.code == "unknownApp" && unknownApp?.id == 100, "wake of an unknown app answered \(unknownApp.map(\.description) ?? "end of stream")")
                try bystander.send(header: #"{"type":"status","id":101}"#)
                let still = try bystander.next()
                await h.expect(still?.type == "reply" && still?.id == 101, "after request errors the bystander got \(still.map(\.description) ?? "end of stream")")
                await h.expect(h.isDaemonRunning, "vigild died")
            }
        }
    }
}

/// A tiny python3 client moved into an app's cgroup before it says hello: it
/// waits until /proc/self/cgroup shows the app's cgroup, connects, says
/// `hello`, and prints the answer's header and whether the daemon then closed.
enum PeerHelper {
    struct Result {
        var output: String
        var code: String?
        var closed: Bool
    }

    static let script = #"""
        import json, socket, struct, sys, time
        path, cgroup, hello = sys.argv[1], sys.argv[2], sys.argv[3]
        end = time.monotonic() + 20
        def current():
            with open("/proc/self/cgroup") as f:
                return [l[3:] for l in f.read().splitlines() if l.startswith("0::")][0]
        while current() != cgroup:
            if time.monotonic() > end:
                print(json.dumps({"helper": "never moved into " + cgroup, "cgroup": current()})); sys.exit(2)
            time.sleep(0.005)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(path)
        h = hello.encode()
        s.sendall(struct.pack("<II", len(h), 0) + h)
        data = b""
        closed = False
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    closed = True
                    break
                data += chunk
        except socket.timeout:
            pass
        header = None
        if len(data) >= 8:
            hl, bl = struct.unpack_from("<II", data)
            header = json.loads(data[8:8 + hl])
        print(json.dumps({"header": header, "closed": closed}))
        """#

    static func run(in group: Cgroup, relativePath: String, socket: String, directory: String, hello: String) async throws -> Result {
        let output = directory + "/peer-helper-\(MonotonicClock.now).out"
        let fd = open(output, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw StopTestReason("cannot open \(output)") }
        defer { close(fd) }
        let process = try ProcessSpawner.spawn(SpawnRequest(
            executable: "/usr/bin/python3", arguments: ["-c", script, socket, relativePath, hello], output: fd, name: "peer-helper"))
        defer { if process.pidfd >= 0 { close(process.pidfd) } }
        do {
            try group.adopt(process.pid)
        } catch {
            _ = kill(process.pid, SIGKILL)
            _ = try? ProcessControl.reap(process)
            throw StopTestReason("cannot move the helper into \(group.path): \(error)")
        }
        let started = MonotonicClock.now
        var status: ProcessStatus?
        while status == nil {
            status = try ProcessControl.reap(process)
            if status == nil {
                if seconds(since: started) > 30 * DaemonHarness.timeoutScale {
                    _ = kill(process.pid, SIGKILL)
                    throw StopTestReason("the peer helper did not finish")
                }
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        let text = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
        struct Printed: Decodable {
            struct Header: Decodable { var type: String; var code: String? }
            var header: Header?
            var closed: Bool
        }
        let printed = text.split(separator: "\n").last.flatMap { try? JSONDecoder().decode(Printed.self, from: Data($0.utf8)) }
        return Result(output: "\(status.map { "\($0)" } ?? "?"): \(text)", code: printed?.header?.code, closed: printed?.closed ?? false)
    }
}
