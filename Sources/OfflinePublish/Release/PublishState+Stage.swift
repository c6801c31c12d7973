import Foundation
import OfflineAgent

/// The staged rollout of a publish state as a server reads it (docs/PROTOCOL.md,
/// "Staged rollout"), with the server's clock, for `offline-server --auto-halt`,
/// `/stats` and the dashboard.
extension PublishState {
    /// The verbs that set the latest version's stage: the last revision of one of them
    /// is when the stage now in force began (a halt, a resume, a new version).
    static let stageVerbs: Set<String> = ["publish", "revert", "promote", "stage", ReleaseEditor.haltVerb]

    /// The stage in force at `now`: the last schedule step begun by then (0 before the
    /// first), else `stage`, else 100, as a device with a right clock computes it.
    public func stageInForce(at now: Date) -> Int {
        guard let schedule = stageSchedule, !schedule.isEmpty,
              let text = publishedAt, let published = RFC3339.date(from: text) else { return stage ?? 100 }
        let elapsed = now.timeIntervalSince(published)
        return schedule.last { Double($0.afterSeconds) <= elapsed }?.percent ?? 0
    }

    /// Whether the latest version is still being staged at `now`: a stage or schedule
    /// was given, some devices may take it (the stage in force is above 0), and not all
    /// may yet (below 100, or a schedule step still to come). A version published at
    /// 100 % or halted (0) is not.
    public func isStaging(at now: Date) -> Bool {
        let percent = stageInForce(at: now)
        guard percent > 0 else { return false }
        if let schedule = stageSchedule, !schedule.isEmpty, let text = publishedAt, let published = RFC3339.date(from: text) {
            let elapsed = now.timeIntervalSince(published)
            return percent < 100 || schedule.contains { Double($0.afterSeconds) > elapsed }
        }
        return stage != nil && percent < 100
    }

    /// The last revision that set the latest version's stage (`publish`, `revert`,
    /// `promote`, `stage`, `auto-halt`); nil in states older than revisions.
    public var lastStageRevision: PublishRevision? {
        revisions?.last { $0.version == latest && Self.stageVerbs.contains($0.verb) }
    }
}
