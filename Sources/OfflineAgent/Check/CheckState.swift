import FoundationEssentials

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
