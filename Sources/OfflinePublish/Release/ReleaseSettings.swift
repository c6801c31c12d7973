import Foundation
import OfflineAgent

/// What `offline-publish set` changes on a live release; nil leaves a setting as it is.
public struct ReleaseSettings: Sendable {
    /// The gray switch: share of devices (0–100) allowed to use the package offline.
    public var rollout: Int?
    /// The lowest version still used offline; at most the latest version.
    public var miniVersion: Version?
    /// `.at(date)` (a relative `7d` is turned into a date by the caller), `.never`, or `.keep`.
    public var expires: PublishOptions.Expiry = .keep
    /// `any` or `wifi`.
    public var networkType: Manifest.NetworkType?
    /// The URL prefixes the package serves; replaces the list.
    public var whitelist: [String]?
    /// The entry page for single-page routes: a file of the latest package.
    public var fallback: String?

    /// Settings that change nothing yet.
    public init(
        rollout: Int? = nil, miniVersion: Version? = nil, expires: PublishOptions.Expiry = .keep,
        networkType: Manifest.NetworkType? = nil, whitelist: [String]? = nil, fallback: String? = nil
    ) {
        self.rollout = rollout
        self.miniVersion = miniVersion
        self.expires = expires
        self.networkType = networkType
        self.whitelist = whitelist
        self.fallback = fallback
    }

    /// Whether any setting is given.
    var isEmpty: Bool {
        rollout == nil && miniVersion == nil && expires == .keep && networkType == nil && whitelist == nil && fallback == nil
    }
}
