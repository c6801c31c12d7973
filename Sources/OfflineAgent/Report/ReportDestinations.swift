import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// Where each app's reports go: `<root>/reports/apps/<app>` holds the URL its last sync
/// was given, so lifecycle transitions made without a URL (`mark-good`, a rollback by
/// `serve`) reach the same collector. A sync without a report URL removes it.
package enum ReportDestinations {
    private static func path(root: String, app: String) -> String { "\(ReportQueue.directory(root: root))/apps/\(app)" }

    /// The collector of `app`, if its syncs report.
    package static func url(root: String, app: String) -> URL? {
        guard AppName.isValid(app), let data = FileManager.default.contents(atPath: path(root: root, app: app)) else { return nil }
        return URL(string: String(decoding: data, as: UTF8.self))
    }

    /// Records `url` as the collector of `app` (nil: it does not report); writes only on change.
    package static func remember(root: String, app: String, url: URL?) throws {
        guard AppName.isValid(app), self.url(root: root, app: app) != url else { return }
        let path = path(root: root, app: app)
        guard let url else {
            unlink(path)
            return
        }
        try FileManager.default.createDirectory(atPath: FileSystem.parent(of: path), withIntermediateDirectories: true)
        try FileSystem.writeAtomically(Data(url.absoluteString.utf8), to: path)
    }
}
