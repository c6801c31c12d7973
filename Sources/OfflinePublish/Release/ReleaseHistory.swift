import Foundation
import OfflineAgent

/// What `offline-publish history` shows: the app's versions and the revisions of its
/// live release, oldest first.
public struct ReleaseHistory: Sendable, Codable {
    /// One published version.
    public struct Entry: Sendable, Codable {
        public var version: Version
        public var size: Int64
        public var sha256: String
    }

    public var app: String
    public var latest: Version
    /// The latest version's staged rollout: `100%`, `0%`, or `schedule 5@0h,…`.
    public var stage: String
    public var publishedAt: String?
    public var miniVersion: Version
    public var rollout: Int
    public var expires: String?
    public var versions: [Entry]
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
