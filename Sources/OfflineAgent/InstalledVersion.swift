import Foundation

/// How a version arrived.
public enum UpdateMethod: String, Sendable, Codable {
    case patch, full
}

/// What the store records beside an installed version directory (`versions/<v>.json`),
/// written before the version becomes active.
public struct InstalledVersion: Sendable, Equatable, Codable {
    public var version: Version
    /// SHA-256 of the full package zip (kept as `packages/<v>.zip` for the next patch).
    public var packageSha256: String
    public var miniVersion: Version
    public var whitelist: [String]
    public var rollout: Int
    public var installedAt: Date
    public var via: UpdateMethod
    /// The version that was active before this one, kept for rollback.
    public var previousVersion: Version?
}

/// Per-app check state (`check.json`): the throttle, the server's `Retry-After`, the
/// ETag and the newest `miniVersion` any trusted manifest announced.
struct CheckState: Sendable, Equatable, Codable {
    var lastCheck: Date?
    var notBefore: Date?
    var etag: String?
    /// The installed version the ETag was obtained with: the answer depends on `current`.
    var etagCurrent: String?
    var knownMiniVersion: Version?
}
