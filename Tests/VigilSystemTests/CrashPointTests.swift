import Testing
import VigilSystem

@Suite("crash points: VIGIL_CRASH_POINT")
struct CrashPointTests {
    @Test func parsesNamesMomentsAndHits() {
        #expect(CrashPoint.parse("") == [])
        #expect(CrashPoint.parse("journal.write") == [.init(name: "journal.write", moment: .after, hit: 1)])
        #expect(CrashPoint.parse("journal.sent:before,snapshot.state:after:3") == [
            .init(name: "journal.sent", moment: .before, hit: 1), .init(name: "snapshot.state", moment: .after, hit: 3),
        ])
        // Malformed entries are skipped, never a crash of their own.
        #expect(CrashPoint.parse("a:sideways,b:before:0,c:after:x,:before,d:before:1:2,e@") == [])
    }

    @Test func aGateFileTakesTheRestOfTheEntry() {
        #expect(CrashPoint.parse("state.parts:after:1@/tmp/x:y/armed,journal.sent") == [
            .init(name: "state.parts", moment: .after, hit: 1, gate: "/tmp/x:y/armed"),
            .init(name: "journal.sent", moment: .after, hit: 1),
        ])
        #expect(CrashPoint.parse("state.parts@/run/armed") == [
            .init(name: "state.parts", moment: .after, hit: 1, gate: "/run/armed"),
        ])
    }

    @Test func inertWithoutTheVariable() {
        // The test runner does not set it: reaching any point returns.
        #expect(CrashPoint.armed.isEmpty)
        CrashPoint.reach("journal.write", .before)
        CrashPoint.reach(["journal.write", "journal.sent"], .after)
    }
}
