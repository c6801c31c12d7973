/// What counting one launch of an app did (`Agent.recordLaunch`, serve's `/open`).
public enum LaunchOutcome: Sendable, Equatable {
    /// No version of the app is active (or the active one is bad and none is left).
    case notInstalled
    /// The active version is confirmed: launches are no longer counted.
    case confirmed
    /// One more unconfirmed launch of a trial version: `launches` of at most `limit`
    /// (0: never rolled back automatically).
    case counted(launches: Int, limit: Int)
    /// The trial version had used up its launches: it was rolled back before this launch.
    case rolledBack(LifecycleTransition)
    /// The launch was for a version that is no longer the active one: nothing was counted.
    case versionChanged
}
