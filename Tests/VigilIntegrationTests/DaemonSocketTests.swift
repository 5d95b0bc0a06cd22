import Testing
import VigilKit

/// Where clients look for the daemon (docs/protocol.md, "Transport"), and the
/// fallback vigilctl takes from the per-user socket to the system one.
@Suite("Daemon socket resolution")
struct DaemonSocketTests {
    @Test func anExplicitPathOrVigilSocketIsTheOnlyCandidate() {
        #expect(DaemonSocket.candidates(explicit: "/x.sock", environment: ["XDG_RUNTIME_DIR": "/run/user/1"]) == ["/x.sock"])
        #expect(DaemonSocket.candidates(environment: ["VIGIL_SOCKET": "/y.sock", "XDG_RUNTIME_DIR": "/run/user/1"]) == ["/y.sock"])
    }

    @Test func thePerUserSocketThenTheSystemOne() {
        #expect(DaemonSocket.candidates(environment: ["XDG_RUNTIME_DIR": "/run/user/1"])
            == ["/run/user/1/vigil/vigild.sock", "/run/vigil/vigild.sock"])
        #expect(DaemonSocket.candidates(environment: ["XDG_RUNTIME_DIR": "", "VIGIL_SOCKET": ""]) == ["/run/vigil/vigild.sock"])
        #expect(DaemonSocket.candidates(environment: [:]) == [DaemonSocket.systemPath])
    }
}
