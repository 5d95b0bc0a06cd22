import Foundation
import Testing
import VigilKit

/// Steps many tests share, each checked from outside and through the API.
extension DaemonHarness {
    /// Launches `id` in the foreground and waits until it is active (its process
    /// connected). Returns its pid.
    @discardableResult
    func launchActive(_ id: String, sourceLocation: SourceLocation = #_sourceLocation) async throws -> Int32 {
        try await perform(.launch, id)
        try await waitUntil("\(id) is active", timeout: 20, every: 0.05, sourceLocation: sourceLocation) {
            try await state(id) == .active
        }
        guard let pid = try await info(id).pid else {
            try await fail("\(id) is active but has no pid", sourceLocation: sourceLocation)
        }
        return pid
    }

    /// Launches `id`, sends it to the background and waits until it is suspended.
    @discardableResult
    func launchAndSuspend(_ id: String, sourceLocation: SourceLocation = #_sourceLocation) async throws -> Int32 {
        let pid = try await launchActive(id, sourceLocation: sourceLocation)
        try await perform(.background, id)
        try await waitUntilSuspended(id, timeout: 20, sourceLocation: sourceLocation)
        return pid
    }

    /// Waits until the app is stopped from outside (cgroup.events `frozen 1`, or
    /// state `T` with the signal fallback) and `apps` says `suspended`.
    /// Returns the seconds until it was first seen stopped from outside.
    @discardableResult
    func waitUntilSuspended(_ id: String, timeout: Double, sourceLocation: SourceLocation = #_sourceLocation) async throws -> Double {
        let elapsed: Double
        if cgroupRoot != nil {
            elapsed = try await waitUntil("\(id) is frozen (cgroup.events)", timeout: timeout, every: 0.01, sourceLocation: sourceLocation) {
                isFrozen(id)
            }
        } else {
            let pid = try await info(id).pid
            elapsed = try await waitUntil("\(id) (pid \(pid.map(String.init) ?? "none")) is stopped (T)", timeout: timeout, every: 0.01, sourceLocation: sourceLocation) {
                pid.map { processState($0) == "T" } ?? false
            }
        }
        let state = try await state(id)
        await expect(state == .suspended, "\(id) is stopped from outside but vigild says \(state)", sourceLocation: sourceLocation)
        return elapsed
    }

    /// Waits until the app's cgroup holds no process and `apps` says `notRunning`.
    func waitUntilGone(_ id: String, timeout: Double, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        if cgroupRoot != nil {
            try await waitUntil("\(id)'s cgroup is empty (populated 0)", timeout: timeout, sourceLocation: sourceLocation) {
                !isPopulated(id)
            }
        }
        try await waitUntil("vigild says \(id) is notRunning", timeout: timeout, every: 0.05, sourceLocation: sourceLocation) {
            try await state(id) == .notRunning
        }
    }

    /// Waits for the first record that matches.
    @discardableResult
    func waitForRecord(
        _ id: String, _ what: String, timeout: Double = 20, sourceLocation: SourceLocation = #_sourceLocation,
        where predicate: (DemoRecord) -> Bool
    ) async throws -> DemoRecord {
        var found: DemoRecord?
        try await waitUntil("\(id) records \(what)", timeout: timeout, sourceLocation: sourceLocation) {
            found = records(id).first(where: predicate)
            return found != nil
        }
        return found!
    }

    /// The record of event `seq`, first delivery.
    @discardableResult
    func waitForEvent(_ id: String, seq: UInt64, timeout: Double = 20, sourceLocation: SourceLocation = #_sourceLocation) async throws -> DemoRecord {
        try await waitForRecord(id, "event \(seq)", timeout: timeout, sourceLocation: sourceLocation) {
            $0.kind == "event" && $0.seq == seq
        }
    }

    /// The decisions about `id` with `action`.
    func decisions(_ id: String, action: String) async throws -> [DecisionRecord] {
        try await decisions(id).filter { $0.action == action }
    }
}
