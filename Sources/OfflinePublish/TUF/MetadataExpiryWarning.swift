import Foundation
import OfflineAgent

/// A warning about a publish directory's TUF metadata that expires soon
/// (docs/PUBLISHING.md, "Freshness"), with what renews it: devices refuse metadata once
/// it has expired (`metadata-expired`) and keep their versions until someone re-signs
/// it. `offline-publish` prints these after each command on a directory;
/// `offline-server` shows them on `/dashboard` (and `/stats` gives the notices).
package struct MetadataExpiryWarning: Sendable {
    /// The role, its version and expiry (`soon` is true).
    package var notice: TUFExpiryNotice
    /// What renews it, for people.
    package var fix: String

    /// The warnings for `publishDirectory` at `now`: a notice of each role whose
    /// metadata expires within its window (`TUFExpiryNotice`); none without metadata.
    ///
    /// - Parameter expiry: the lifetimes the windows are counted from (a server keeping
    ///   the timestamp fresh gives its own timestamp lifetime).
    package static func all(publishDirectory: String, now: Date, expiry: TUFExpiry = TUFExpiry()) -> [MetadataExpiryWarning] {
        TUFRepository.expiryNotices(publishDirectory: publishDirectory, now: now, expiry: expiry).filter(\.soon).map { notice in
            let fix = switch notice.role {
            case "root": "renew it: offline-publish root propose, sign, commit (docs/PUBLISHING.md, \"Keys\")"
            case "timestamp": "run offline-publish timestamp with the timestamp key, or any release verb"
            default: "run any release verb with the key (it re-signs what is past half its life)"
            }
            return MetadataExpiryWarning(notice: notice, fix: fix)
        }
    }

    /// Warns on stderr, after a command on a publish directory, one line per warning:
    /// `offline-publish: warning: timestamp v2 expires … in DIR/metadata: FIX`.
    package static func check(publishDirectory: String, now: Date = Date()) {
        for warning in all(publishDirectory: publishDirectory, now: now) {
            let line = "offline-publish: \(warning.notice.describe(now: now)) in \(publishDirectory)/metadata: \(warning.fix)\n"
            FileHandle.standardError.write(Data(line.utf8))
        }
    }
}
