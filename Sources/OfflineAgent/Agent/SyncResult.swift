import FoundationEssentials

/// How a sync ended.
public enum SyncResult: String, Sendable, Codable {
    case updated
    case upToDate = "up-to-date"
    case throttled
    case deferred
    case failed
    /// The app is held (`Agent.hold`): a different version was offered, nothing downloaded.
    case held
    /// The offered version is marked bad on this device: nothing downloaded.
    case knownBad = "known-bad"
}
