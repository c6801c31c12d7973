import FoundationEssentials

/// What `Agent.status` reports for one app.
public struct AppStatus: Sendable {
    /// The app.
    public var app: String
    /// The active version's record; nil when nothing is installed.
    public var installed: InstalledVersion?
    /// The miniVersion in force (the higher of the installed record and the last manifest).
    public var miniVersion: Version?
    /// Whether the active version may be used offline (≥ miniVersion, rollout > 0 for this device).
    public var usable: Bool
    /// The active version's directory; nil when nothing is installed.
    public var path: String?
    /// When the manifest was last checked; nil before the first check.
    public var lastCheck: Date?
    /// The earliest next check (throttle, `Retry-After`, backoff); nil when a check may happen now.
    public var nextCheck: Date?
    /// Consecutive failed checks; 0 after a success.
    public var failures = 0
    /// The bytes the app keeps on disk: versions, kept packages, downloads.
    public var diskUsage = DiskUsage()
}
