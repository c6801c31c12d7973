import FoundationEssentials

/// Per-app check state (`check.json`): the throttle, the server's `Retry-After`, the
/// ETag, the newest `miniVersion` any trusted manifest announced, and the epochs
/// (`ManifestDecision`, rule 0): written atomically, like every state file.
struct CheckState: Sendable, Equatable, Codable {
    var lastCheck: Date?
    var notBefore: Date?
    var etag: String?
    /// The installed version the ETag was obtained with: the answer depends on `current`.
    var etagCurrent: String?
    var knownMiniVersion: Version?
    /// The highest `epoch` of any trusted manifest: a lower one is refused for ever.
    var knownEpoch: Int?
    /// The epoch of the manifest the version `installedEpochVersion` was installed (or
    /// last confirmed) from; another installed version counts as `knownEpoch`.
    var installedEpoch: Int?
    var installedEpochVersion: String?
}
