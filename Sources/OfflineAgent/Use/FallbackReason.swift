import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// Why a URL is not served offline.
public enum FallbackReason: String, Sendable, Codable, CaseIterable {
    /// No whitelist entry of any app with an active version matches the URL.
    case notWhitelisted = "not-whitelisted"
    /// The active version is below the last known `miniVersion`.
    case belowMiniVersion = "below-mini-version"
    /// This device's rollout bucket is above the app's `rollout`.
    case outsideRollout = "outside-rollout"
    /// The path names no regular file inside the version, or tries to leave it.
    case missingFile = "missing-file"
    /// The active version is marked bad (`mark-bad`, `rollback`, an automatic
    /// rollback) and no good version is left, or the switch back is still pending.
    case badVersion = "bad-version"
}
