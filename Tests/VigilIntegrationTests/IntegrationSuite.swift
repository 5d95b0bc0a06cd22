import Testing

/// Every test starts a real vigild (and real apps) of its own. They run one at a
/// time: timing assertions on a 2-core machine (or a QEMU guest) are only
/// meaningful without a dozen daemons competing for the CPU.
@Suite("vigild integration", .serialized, .timeLimit(.minutes(2)))
struct Integration {}

/// Tests that freeze apps with the cgroup v2 freezer need root and a writable cgroup2 tree.
let needsCgroups = Testing.ConditionTrait.enabled(
    if: Environment.canUseCgroups, "needs root and a writable cgroup v2 tree (the freezer)")
