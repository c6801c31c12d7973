import FoundationEssentials

/// Settings of one agent, shared by all its syncs.
public struct AgentConfiguration: Sendable {
    /// Timeouts and redirect limits.
    public var network = NetworkSettings()
    /// Throttle interval between manifest checks.
    public var throttle = Throttle()
    /// The wait after consecutive failed checks.
    public var backoff = Backoff()
    /// Largest file a manifest may name, and largest package extracted (default 1 GiB).
    public var maxPackageBytes: Int64 = 1 << 30
    /// Entry-count cap for extraction.
    public var maxEntries = 100_000
    /// Free space kept on top of what a plan needs, so an update never fills the disk.
    public var diskReserveBytes: Int64 = 1 << 20
    /// The device's trial setting for newly installed versions. Nil (the default): as
    /// the manifest asks (`Manifest.trialLaunches`; a manifest asking nothing installs a
    /// version `good`). N > 0: every new version is on trial for N launches and rolled
    /// back unless confirmed (`Agent.markGood`): for a host that confirms. 0: trials off,
    /// whatever the manifest asks. Trials are opt-in because a page that never confirms
    /// would otherwise be rolled back on every device.
    public var maxTrialLaunches: Int?
    /// The collector of fleet reports for syncs that name none (`SyncOptions.report`); nil: none.
    public var report: URL?
    /// The bearer token of `report`'s collector, for syncs that name neither a collector
    /// nor a token of their own (`SyncOptions.reportToken`); it only goes to `report`.
    public var reportToken: String?
    /// How fleet reports are queued and sent: the deadline per sync, the queue's bound, the backoff.
    public var reporting = ReportSettings()
    /// The wall clock the throttle and manifest rules read; tests inject a wrong one.
    public var clock: @Sendable () -> Date = { Date() }

    /// The defaults described on each property.
    public init() {}

    var extractionLimits: ExtractionLimits { ExtractionLimits(maxTotalBytes: maxPackageBytes, maxEntries: maxEntries) }
}
