import FoundationEssentials

/// What one sync of one app did.
public struct SyncReport: Sendable {
    /// The app synced.
    public var app: String
    /// What happened.
    public var result: SyncResult
    /// The active version after the run.
    public var version: Version?
    /// The active version before the run.
    public var previousVersion: Version?
    /// How the new version arrived, when one did.
    public var via: UpdateMethod?
    /// The version the manifest offered, when one was read.
    public var offeredVersion: Version?
    /// The manifest's full package size, when one was read (for a patch manifest, its `fullSize`).
    public var fullSize: Int64?
    /// Package bytes (patch, full package) received from the network in this run, also when it failed.
    public var bytesDownloaded: Int64 = 0
    /// Why the sync failed, when it did; nothing installed changed.
    public var error: OfflineAgentError?
    /// For `throttled`: when the next check may happen; for `failed` after a check: the backoff's next check.
    public var nextCheck: Date?
    /// For `throttled`: why the check waits (a failure backoff, the server's `Retry-After`,
    /// the interval since the last check), for people.
    public var throttleReason: String?
    /// Set when the patch could not be used and the full package was fetched instead.
    public var patchFallbackReason: String?
    /// For `notInStage`: the stage in force (0–100) and this device's bucket (1–100).
    public var stage: (percent: Int, bucket: Int)?

    /// Makes this the report of a sync the throttle (or a backoff) held back until `next`,
    /// with `version` installed before and after.
    mutating func throttled(until next: Date, version: Version?, reason: String? = nil) {
        result = .throttled
        throttleReason = reason
        nextCheck = next
        self.version = version
        previousVersion = version
    }
}
