/// The lifecycle state a version had when a newer install replaced it, kept so that a
/// rollback to it restores that state (a good version comes back good, a trial with
/// the launches it had used) instead of starting a fresh trial that could roll back
/// again to nothing.
public struct VersionSnapshot: Sendable, Equatable, Codable {
    /// The version left.
    public var version: Version
    /// Its state then (`trial` or `good`).
    public var state: VersionState
    /// Its unconfirmed launches then.
    public var launches: Int
    /// Its trial's launch limit then.
    public var maxTrialLaunches: Int?

    /// A snapshot of one version's state.
    public init(version: Version, state: VersionState, launches: Int, maxTrialLaunches: Int?) {
        self.version = version
        self.state = state
        self.launches = launches
        self.maxTrialLaunches = maxTrialLaunches
    }
}
