import FoundationEssentials

/// What the store records beside an installed version directory (`versions/<v>.json`),
/// written before the version becomes active.
public struct InstalledVersion: Sendable, Equatable, Codable {
    /// The version installed.
    public var version: Version
    /// SHA-256 of the full package zip (kept as `packages/<v>.zip` for the next patch).
    public var packageSha256: String
    /// The lowest version the manifest allowed offline when this one was installed.
    public var miniVersion: Version
    /// The URL prefixes this version serves offline.
    public var whitelist: [String]
    /// The share of devices (0–100) allowed to use this version offline.
    public var rollout: Int
    /// When the version was installed.
    public var installedAt: Date
    /// How its package arrived: a full download or a patch.
    public var via: UpdateMethod
    /// The version that was active before this one, kept for rollback.
    public var previousVersion: Version?
    /// The package's entry page for single-page routes (the manifest's `fallback`), a
    /// normalised relative path; nil when the manifest names none (and in older records).
    public var fallback: String?
    /// The trial this install runs under: launches allowed unconfirmed before a rollback
    /// (the device's setting, else the manifest's request). Nil or 0: no trial, the
    /// version is good once installed (and in records written before trials were opt-in).
    public var trialLaunches: Int?

    /// A record as an install writes it; public so tools and tests can seed a store.
    public init(
        version: Version, packageSha256: String, miniVersion: Version, whitelist: [String], rollout: Int,
        installedAt: Date, via: UpdateMethod, previousVersion: Version? = nil, fallback: String? = nil,
        trialLaunches: Int? = nil
    ) {
        self.version = version
        self.packageSha256 = packageSha256
        self.miniVersion = miniVersion
        self.whitelist = whitelist
        self.rollout = rollout
        self.installedAt = installedAt
        self.via = via
        self.previousVersion = previousVersion
        self.fallback = fallback
        self.trialLaunches = trialLaunches
    }
}
