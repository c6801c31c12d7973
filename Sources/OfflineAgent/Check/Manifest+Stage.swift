import FoundationEssentials

/// The staged rollout (`docs/PROTOCOL.md`, "Staged rollout"): which devices may take
/// the offered version now. Separate from `rollout`, which decides offline use of
/// what is installed.
extension Manifest {
    /// The newest manifest format this agent reads.
    public static let formatVersion = 2

    /// The stage in force at `now`: the last schedule step begun by then (0 before the
    /// first), else `stage`, else 100.
    ///
    /// `now` is the device's clock: a wrong clock can only make the device enter its
    /// stage early or late. Signature, expiry and version rules do not depend on it.
    public func currentStage(at now: Date) -> Int {
        guard !stageSchedule.isEmpty, let publishedAt else { return stage ?? 100 }
        let elapsed = now.timeIntervalSince(publishedAt)
        return stageSchedule.last { Double($0.afterSeconds) <= elapsed }?.percent ?? 0
    }

    /// Whether the device with rollout bucket `bucket` (1…100, `Resolver.rolloutBucket`)
    /// may download and install the offered version at `now`.
    public func admits(bucket: Int, at now: Date) -> Bool {
        bucket <= currentStage(at: now)
    }

    /// The format and stage rules: a known format; `stage` 0…100; a schedule of 1…16
    /// steps that needs `publishedAt`, excludes `stage`, starts its steps in strictly
    /// increasing order within `ManifestStageStep.maxOffset`, and never shrinks (a
    /// shrinking schedule is a typo; the operator halts with `stage` instead).
    func checkStage(_ fail: (String) -> OfflineAgentError) throws {
        guard (1...Self.formatVersion).contains(format) else {
            throw fail("format \(format) is not one this agent reads (1…\(Self.formatVersion))")
        }
        if let stage, !(0...100).contains(stage) { throw fail(ManifestFields.rule("stage")) }
        guard !stageSchedule.isEmpty else { return }
        guard stageSchedule.count <= ManifestStageStep.maxCount else { throw fail(ManifestFields.rule("stageSchedule")) }
        guard stage == nil else { throw fail("stage and stageSchedule cannot both be given") }
        guard publishedAt != nil else { throw fail("stageSchedule needs publishedAt") }
        if let problem = ManifestStageStep.problem(in: stageSchedule) { throw fail(problem) }
    }
}
