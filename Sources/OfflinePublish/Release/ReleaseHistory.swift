import Foundation
import OfflineAgent

/// What `offline-publish history` shows: the app's versions and the revisions of its
/// live release, oldest first.
public struct ReleaseHistory: Sendable, Codable {
    /// One published version.
    public struct Entry: Sendable, Codable {
        /// The version published.
        public var version: Version
        /// Byte length of its package (`VERSION.zip`).
        public var size: Int64
        /// SHA-256 of its package: equal hashes mean equal bytes (a revert, a promotion).
        public var sha256: String
    }

    /// The app.
    public var app: String
    /// The latest version: what devices are offered.
    public var latest: Version
    /// The latest version's staged rollout: `100%`, `0%`, or `schedule 5@0h,…`.
    public var stage: String
    /// When the latest version was published (RFC 3339); nil in states older than stages.
    public var publishedAt: String?
    /// The lowest version still used offline.
    public var miniVersion: Version
    /// The gray switch (0–100).
    public var rollout: Int
    /// When manifests stop being trusted (RFC 3339); nil: never.
    public var expires: String?
    /// Every published version, oldest first.
    public var versions: [Entry]
    /// Every recorded revision, oldest first (the last `PublishRevision.maxKept`).
    public var revisions: [PublishRevision]

    init(state: PublishState, stage: String) {
        app = state.app
        latest = state.latest
        self.stage = stage
        publishedAt = state.publishedAt
        miniVersion = state.miniVersion
        rollout = state.rollout
        expires = state.expires
        versions = state.versions.map { Entry(version: $0.version, size: $0.size, sha256: $0.sha256) }
        revisions = state.revisions ?? []
    }

    /// The JSON form (`--json`): sorted keys, one object.
    public func json() throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: try encoder.encode(self), as: UTF8.self)
    }

    /// The text form: versions, then revisions.
    public var text: String {
        var lines = ["\(app): latest \(latest), stage \(stage), rollout \(rollout), miniVersion \(miniVersion), expires \(expires ?? "never")"]
        lines.append("versions:")
        lines += versions.map { "  \($0.version)  \($0.size) bytes  sha256 \($0.sha256)" }
        lines.append("revisions:")
        lines += revisions.map { "  \($0.time)  \($0.verb)  \($0.version)  \($0.reason)" }
        return lines.joined(separator: "\n")
    }
}
