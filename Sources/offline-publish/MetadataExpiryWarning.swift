import Foundation
import CommandSupport
import OfflineAgent
import OfflinePublish

/// Warns on stderr, after a command on a publish directory, about TUF metadata that
/// expires soon (docs/PUBLISHING.md, "Freshness"): devices refuse it once it has
/// (`metadata-expired`) and keep their versions until someone re-signs it.
enum MetadataExpiryWarning {
    static func check(publishDirectory: String, now: Date = Date()) {
        for notice in TUFRepository.expiryNotices(publishDirectory: publishDirectory, now: now) where notice.soon {
            let fix = switch notice.role {
            case "root": "renew it: offline-publish root propose, sign, commit (docs/PUBLISHING.md, \"Keys\")"
            case "timestamp": "run offline-publish timestamp with the timestamp key, or any release verb"
            default: "run any release verb with the key (it re-signs what is past half its life)"
            }
            printError("offline-publish: \(notice.describe(now: now)) in \(publishDirectory)/metadata: \(fix)")
        }
    }
}
