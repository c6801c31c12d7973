import Foundation
import OfflineAgent

/// One change to a live release, recorded in `state.json` by `publish` and by every
/// verb that re-signs the manifest (`stage`, `set`, `revert`, `promote`), so
/// `offline-publish history` can say who saw what when.
public struct PublishRevision: Sendable, Equatable, Codable {
    /// When the change was made (RFC 3339, UTC).
    public var time: String
    /// The verb that made it: `publish`, `stage`, `set`, `revert`, `promote`.
    public var verb: String
    /// The latest version after the change.
    public var version: Version
    /// What changed, e.g. `stage 10% -> 50%`, and the operator's `--reason` when given.
    public var reason: String

    /// A revision made at `time` by `verb`.
    public init(time: Date, verb: String, version: Version, reason: String) {
        self.time = RFC3339.string(from: time)
        self.verb = verb
        self.version = version
        self.reason = reason
    }

    /// At most this many revisions are kept (oldest dropped): `state.json` is read on
    /// every server lookup and must stay small.
    public static let maxKept = 200
}

extension PublishRevision {
    /// `revisions` with `revision` added, the oldest dropped past `maxKept`.
    static func appending(_ revision: PublishRevision, to revisions: [PublishRevision]?) -> [PublishRevision] {
        Array(((revisions ?? []) + [revision]).suffix(maxKept))
    }

    /// What changed, followed by the operator's reason when one was given.
    static func reason(_ detail: String, _ operatorReason: String?) -> String {
        guard let operatorReason, !operatorReason.isEmpty else { return detail }
        return "\(detail): \(operatorReason)"
    }
}
