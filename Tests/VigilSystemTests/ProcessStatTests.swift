import Glibc
import Testing
import VigilSystem

@Suite("ProcessStat: /proc/PID/stat as adoption reads it")
struct ProcessStatTests {
    @Test func fieldsAreCountedFromTheLastParenthesis() throws {
        // A command name with spaces and parentheses, as a process may choose.
        let line = "4242 (a) b (c) T 1 4242 4242 0 -1 4194560 120 0 0 0 1 2 0 0 20 0 1 0 987654 1000 200 18446744073709551615"
        let stat = try #require(ProcessStat.parse(line))
        #expect(stat.state == "T" && stat.isStopped && !stat.hasEnded)
        #expect(stat.processGroup == 4242 && stat.session == 4242)
        #expect(stat.startTime == 987654)
        #expect(ProcessStat.parse("4242 (short) S 1 2") == nil)
    }

    @Test func ownProcessIsReadAndStable() throws {
        let stat = try #require(ProcessStat.read(getpid()))
        #expect(stat.session == getsid(0) && stat.processGroup == getpgrp())
        #expect(stat.startTime > 0)
        #expect(ProcessStat.read(getpid())?.startTime == stat.startTime)
    }
}
