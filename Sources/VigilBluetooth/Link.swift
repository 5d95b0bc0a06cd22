import VigilSystem

/// The daemon's view of one peripheral's link: whether it is up and what is
/// being done to bring it up.
struct Link {
    var connected = false
    /// A Device1.Connect call is in flight.
    var connecting = false
    /// Tells Connect calls apart, so a late reply or check acts only on its own attempt.
    var attempt = 0
    /// Re-checks BlueZ's state while a Connect call is in flight.
    var watchdog: TimerID?
    /// Failed attempts since the link was last up: the backoff grows with them.
    var failures = 0
    var retry: TimerID?
    /// vigild's Connect brought it up, so vigild may take it down.
    var ours = false
    /// A Connect has gone unanswered with the link down: discovery runs until
    /// the link is up (the controller then sees the peer advertise, which
    /// completes a connect its own passive scan left pending).
    var needsDiscovery = false

    mutating func cancelAttempt(loop: EventLoop) {
        if let retry { loop.cancelTimer(retry) }
        retry = nil
        stopWatchdog(loop: loop)
        connecting = false
    }

    mutating func stopWatchdog(loop: EventLoop) {
        if let watchdog { loop.cancelTimer(watchdog) }
        watchdog = nil
    }

    /// 0.5 s, 1 s, 2 s, ... at most 8 s: a device that comes back is found
    /// within seconds, and a long absence costs one attempt every 8 s.
    var backoff: Duration {
        .milliseconds(min(500 << min(failures, 4), 8000))
    }
}
