import CVigilShim
import Glibc

/// The process's resource limits, where the daemon changes them.
public enum ResourceLimits {
    /// Raises the soft open-file limit to the hard one and returns it. Apps
    /// that `ProcessSpawner` starts get the limit the daemon started with
    /// (a program using select() breaks above 1024).
    public static func raiseOpenFileLimit() throws(SystemError) -> UInt {
        var soft: UInt = 0
        guard vigil_raise_nofile_limit(&soft) == 0 else { throw SystemError.current("setrlimit(RLIMIT_NOFILE)") }
        return soft
    }
}
