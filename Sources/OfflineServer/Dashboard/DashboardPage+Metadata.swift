import Foundation
import OfflineAgent
import OfflinePublish

extension DashboardPage {
    /// A banner per TUF metadata role of the publish directory that expires soon, with
    /// what renews it (`MetadataExpiryWarning`, the lines `offline-publish` prints): once
    /// expired, every device refuses the repository (`metadata-expired`) and keeps its
    /// version. Nothing when all is fresh.
    func metadataSection() -> String {
        metadataWarnings.map { warning in
            let notice = warning.notice
            return """
                <p class="expiry" data-metadata-role="\(Self.escape(notice.role))" data-version="\(notice.version)" \
                data-expires="\(Self.escape(RFC3339.string(from: notice.expires)))" data-expired="\(notice.expired)">\
                <strong>TUF \(Self.escape(notice.role)) metadata \(notice.expired ? "has expired" : "expires soon").</strong> \
                \(Self.escape(notice.describe(now: generated))): \(Self.escape(warning.fix))</p>

                """
        }.joined()
    }
}
