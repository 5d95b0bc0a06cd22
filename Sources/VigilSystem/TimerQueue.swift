/// The event loop's pending timers: a binary min-heap of deadlines with lazy
/// cancellation, so cancel is O(1) and never has to search the heap.
struct TimerQueue: Sendable {
    private struct Entry: Sendable {
        var deadline: MonotonicInstant
        var id: UInt64

        /// Ties go to the earlier-scheduled timer, so equal deadlines fire in order.
        func precedes(_ other: Entry) -> Bool {
            (deadline, id) < (other.deadline, other.id)
        }
    }

    private var heap: [Entry] = []
    /// Live timers; a heap entry without a handler here was cancelled.
    private var handlers: [UInt64: @Sendable () -> Void] = [:]

    var isEmpty: Bool { handlers.isEmpty }

    mutating func insert(id: UInt64, deadline: MonotonicInstant, handler: @escaping @Sendable () -> Void) {
        handlers[id] = handler
        heap.append(Entry(deadline: deadline, id: id))
        siftUp(heap.count - 1)
    }

    /// Returns false if the timer already fired or was cancelled.
    @discardableResult
    mutating func cancel(id: UInt64) -> Bool {
        guard handlers.removeValue(forKey: id) != nil else { return false }
        // Cancelled entries are dropped when they surface; rebuild if they pile up.
        if heap.count > 64 && heap.count > 2 * handlers.count { rebuild() }
        return true
    }

    /// The earliest live deadline.
    mutating func earliestDeadline() -> MonotonicInstant? {
        dropCancelledTop()
        return heap.first?.deadline
    }

    /// Removes and returns the earliest timer if it is due at `now` and was
    /// scheduled no later than `newestID` (so a handler that re-schedules
    /// itself "now" waits for the next round instead of starving the loop).
    mutating func popDue(at now: MonotonicInstant, scheduledThrough newestID: UInt64) -> (@Sendable () -> Void)? {
        dropCancelledTop()
        guard let top = heap.first, top.deadline <= now, top.id <= newestID else { return nil }
        removeTop()
        return handlers.removeValue(forKey: top.id)
    }

    private mutating func dropCancelledTop() {
        while let top = heap.first, handlers[top.id] == nil { removeTop() }
    }

    private mutating func removeTop() {
        let last = heap.removeLast()
        guard !heap.isEmpty else { return }
        heap[0] = last
        siftDown(0)
    }

    private mutating func rebuild() {
        heap.removeAll { handlers[$0.id] == nil }
        for index in stride(from: heap.count / 2 - 1, through: 0, by: -1) { siftDown(index) }
    }

    private mutating func siftUp(_ index: Int) {
        var child = index
        while child > 0 {
            let parent = (child - 1) / 2
            guard heap[child].precedes(heap[parent]) else { return }
            heap.swapAt(child, parent)
            child = parent
        }
    }

    private mutating func siftDown(_ index: Int) {
        var parent = index
        while true {
            let left = 2 * parent + 1
            let right = left + 1
            var first = parent
            if left < heap.count && heap[left].precedes(heap[first]) { first = left }
            if right < heap.count && heap[right].precedes(heap[first]) { first = right }
            if first == parent { return }
            heap.swapAt(parent, first)
            parent = first
        }
    }
}
