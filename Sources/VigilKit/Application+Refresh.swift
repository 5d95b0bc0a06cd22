import VigilProtocol

/// Background refresh (the `fetch` background mode): like iOS's background
/// app refresh, the app asks to be woken now and then and vigild decides
/// when, batching apps and stretching the interval of an app that keeps
/// finding nothing. A refresh arrives as an `app.refresh` event
/// (`RefreshEventKind.refresh`) with the usual processing window; handle it,
/// acknowledge it, and report with `completeRefresh`, which ends the window.
extension Application {
    /// Asks to be woken for a refresh every `interval` seconds at the least,
    /// the first not before `earliestBegin` seconds from now (default: one
    /// interval). Replaces an earlier schedule; vigild keeps it across its
    /// restarts and the app's. Throws when the manifest lacks `fetch` or the
    /// numbers are out of range.
    @discardableResult
    public func scheduleRefresh(every interval: Double, earliestBegin: Double? = nil) async throws -> RefreshScheduled {
        try await session.request(ScheduleRefresh(interval: interval, earliestBegin: earliestBegin), expecting: RefreshScheduled.self)
    }

    /// No more refresh wakes.
    public func cancelRefresh() async throws {
        _ = try await session.request(CancelRefresh(), expecting: Done.self)
    }

    /// Reports how the refresh that woke the app went. `.noData` again and
    /// again stretches the interval (up to eight times); `.newData` resets
    /// it. Ends the processing window, as `finishedProcessing` does.
    public func completeRefresh(_ result: RefreshResult) async {
        _ = try? await session.request(CompleteRefresh(result: result), expecting: Done.self)
    }
}
