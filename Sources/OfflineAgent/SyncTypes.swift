import Foundation

/// The kind of network the device is on, for `networkType: wifi` manifests.
public enum NetworkKind: String, Sendable, Codable {
    case metered, unmetered
}

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
    /// Launches a newly installed version may have without being confirmed
    /// (`Agent.markGood`) before it is rolled back; 0 never rolls back automatically.
    public var maxTrialLaunches = VersionLifecycle.defaultMaxTrialLaunches
    /// The wall clock the throttle and manifest rules read; tests inject a wrong one.
    public var clock: @Sendable () -> Date = { Date() }

    public init() {}

    var extractionLimits: ExtractionLimits { ExtractionLimits(maxTotalBytes: maxPackageBytes, maxEntries: maxEntries) }
}

/// Per-call options of `Agent.sync`.
public struct SyncOptions: Sendable {
    /// Check now: skip the 5-minute throttle, any `Retry-After` wait and the failure backoff.
    public var force = false
    /// Base64 Ed25519 public key; when set, every manifest must carry a valid signature.
    public var publicKey: String?
    /// More trusted keys (rotation): a manifest signed by any of `publicKey` and these verifies.
    public var publicKeys: [String] = []
    /// The device's network; `wifi` manifests are deferred on `.metered`.
    public var network: NetworkKind = .unmetered
    /// The cookie profile whose jar the sync's requests carry and fill (see `CookieProfile`).
    public var profile: String = CookieProfile.defaultName

    public init(
        force: Bool = false, publicKey: String? = nil, publicKeys: [String] = [], network: NetworkKind = .unmetered,
        profile: String = CookieProfile.defaultName
    ) {
        self.force = force
        self.publicKey = publicKey
        self.publicKeys = publicKeys
        self.network = network
        self.profile = profile
    }

    /// Every trusted key, `publicKey` first.
    var trustedKeys: [String] { (publicKey.map { [$0] } ?? []) + publicKeys }
}

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

/// What one sync of one app did.
public struct SyncReport: Sendable {
    public var app: String
    public var result: SyncResult
    /// The active version after the run.
    public var version: Version?
    /// The active version before the run.
    public var previousVersion: Version?
    /// How the new version arrived, when one did.
    public var via: UpdateMethod?
    public var bytesDownloaded: Int64 = 0
    /// Why the sync failed, when it did; nothing installed changed.
    public var error: OfflineAgentError?
    /// For `throttled`: when the next check may happen; for `failed` after a check: the backoff's next check.
    public var nextCheck: Date?
    /// Set when the patch could not be used and the full package was fetched instead.
    public var patchFallbackReason: String?
}

/// A step of a sync, for progress display.
public struct ProgressEvent: Sendable, Equatable {
    public enum Phase: String, Sendable {
        case checking, downloading, patching, extracting, installing, done
    }

    public var app: String
    public var phase: Phase
    /// Bytes done and expected, for downloads; 0 otherwise.
    public var completed: Int64
    public var total: Int64
}

/// What `Agent.status` reports for one app.
public struct AppStatus: Sendable {
    public var app: String
    public var installed: InstalledVersion?
    /// The miniVersion in force (the higher of the installed record and the last manifest).
    public var miniVersion: Version?
    /// Whether the active version may be used offline (≥ miniVersion, rollout > 0 for this device).
    public var usable: Bool
    public var path: String?
    public var lastCheck: Date?
    /// The earliest next check (throttle, `Retry-After`, backoff); nil when a check may happen now.
    public var nextCheck: Date?
    /// Consecutive failed checks; 0 after a success.
    public var failures = 0
    /// The bytes the app keeps on disk: versions, kept packages, downloads.
    public var diskUsage = DiskUsage()
}
