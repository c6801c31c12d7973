import FoundationEssentials

/// How a sync ended.
public enum SyncResult: String, Sendable, Codable {
    /// A new version was installed and is active.
    case updated
    /// The manifest offers the active version: nothing to do.
    case upToDate = "up-to-date"
    /// Not checked: within the throttle interval, a `Retry-After` or the failure backoff.
    case throttled
    /// The manifest asks for an unmetered network (`wifi`) and the device is on a metered one.
    case deferred
    /// The sync failed (`SyncReport.error` says why); the installed version is untouched.
    case failed
    /// The app is held (`Agent.hold`): a different version was offered, nothing downloaded.
    case held
    /// The offered version is marked bad on this device: nothing downloaded.
    case knownBad = "known-bad"
    /// The offered version is in a staged rollout this device's bucket is not in yet
    /// (`docs/PROTOCOL.md`, "Staged rollout"): nothing downloaded, the installed version
    /// stays in use offline.
    case notInStage = "not-in-stage"
}
