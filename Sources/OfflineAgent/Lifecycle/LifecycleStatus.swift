/// The lifecycle of one app as `status --json` and `history` show it.
public struct LifecycleStatus: Sendable, Equatable {
    /// The app.
    public var app: String
    /// The active version (the one the `current` link names), nil when none.
    public var version: Version?
    /// The active version's state; nil when nothing is active.
    public var state: VersionState?
    /// Unconfirmed launches of a trial version.
    public var launches: Int
    /// The launch limit of the trial in force (0: no automatic rollback).
    public var maxTrialLaunches: Int
    /// Syncs leave the active version alone.
    public var held: Bool
    /// Versions never installed again, oldest first.
    public var badVersions: [BadVersion]
    /// Transitions, oldest first (the last `VersionLifecycle.historyLimit`).
    public var history: [LifecycleEvent]
}
