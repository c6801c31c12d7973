import Crypto
import Foundation
import OfflineAgent

/// Where `offline-server` keeps its SQLite reports database when `--reports-db` is not
/// given: outside the publish directory, which a static host (a CDN, nginx) may serve
/// whole, database included (docs/PROTOCOL.md, "Collector (offline-server)").
public enum ReportDatabaseLocation {
    /// Where servers before this rule kept it: `DIR/.offline-server/reports.sqlite`.
    public static func legacy(directory: String) -> String {
        "\(directory)/.offline-server/reports.sqlite"
    }

    /// The default for the publish directory `directory`, and a warning to log when it is
    /// the old place: a database found there keeps being used (its history stays), but
    /// should move. Otherwise `STATE/offline-server/NAME-HASH/reports.sqlite`, STATE being
    /// `$STATE_DIRECTORY` (systemd's `StateDirectory=`), else `$XDG_STATE_HOME`, else
    /// `$HOME/.local/state`; NAME the directory's last component and HASH 12 hex digits of
    /// the SHA-256 of its absolute path, so two publish directories never share one.
    public static func defaultPath(
        directory: String, environment: [String: String] = ProcessInfo.processInfo.environment
    ) -> (path: String, warning: String?) {
        let legacy = legacy(directory: directory)
        if FileManager.default.fileExists(atPath: legacy) {
            return (legacy, "the reports database is inside the publish directory (\(legacy)), which a static host serving the directory may hand out: move it elsewhere and name it with --reports-db")
        }
        guard let path = statePath(directory: directory, environment: environment) else {
            return (legacy, "no state directory (HOME, XDG_STATE_HOME or STATE_DIRECTORY) to keep the reports database in: it is kept inside the publish directory (\(legacy)); name another place with --reports-db")
        }
        return (path, nil)
    }

    /// `STATE/offline-server/NAME-HASH/reports.sqlite` (see `defaultPath`), whatever is in
    /// the old place; nil without a state directory.
    static func statePath(directory: String, environment: [String: String]) -> String? {
        let state: String
        if let systemd = environment["STATE_DIRECTORY"]?.split(separator: ":").first, !systemd.isEmpty {
            state = String(systemd)
        } else if let xdg = environment["XDG_STATE_HOME"], xdg.hasPrefix("/") {
            state = xdg
        } else if let home = environment["HOME"], home.hasPrefix("/") {
            state = home + "/.local/state"
        } else {
            return nil
        }
        let absolute = URL(fileURLWithPath: directory).standardizedFileURL.resolvingSymlinksInPath().path
        let hash = SHA256.hash(data: Data(absolute.utf8)).prefix(6).map { String(format: "%02x", $0) }.joined()
        let name = URL(fileURLWithPath: absolute).lastPathComponent.filter { $0.isLetter || $0.isNumber || "._-".contains($0) }
        return "\(state)/offline-server/\(name.isEmpty ? "publish" : name)-\(hash)/reports.sqlite"
    }

    /// Where the collector secret is kept when `--collector-secret` is not given, and a
    /// warning to log. Never created inside the publish directory by default, where a
    /// static host may hand it out and with it every device's credential: with the
    /// database in the old default place there (`databaseGiven` false) or on PostgreSQL
    /// it goes to the state directory. A secret an older server created there keeps being
    /// used, so enrolled devices keep their credentials; a `--reports-db` inside the
    /// publish directory keeps its secret beside it; both with a warning. Nil (PostgreSQL
    /// without a state directory): a secret in memory only.
    public static func secretPath(
        directory: String, database: String, databaseGiven: Bool, environment: [String: String] = ProcessInfo.processInfo.environment
    ) -> (path: String?, warning: String?) {
        let state = statePath(directory: directory, environment: environment)
        if !PostgresReportStore.isURL(database) {
            let beside = ReferenceServer.secretPath(beside: database)
            guard isInside(beside, directory: directory) else { return (beside, nil) }
            if databaseGiven || FileManager.default.fileExists(atPath: beside) || state == nil {
                return (beside, "the collector secret is inside the publish directory (\(beside)), which a static host serving the directory may hand out, and with it every device's credential: keep it elsewhere and name it with --collector-secret")
            }
        }
        guard let state else {
            return (nil, "no state directory (HOME, XDG_STATE_HOME or STATE_DIRECTORY) to keep the collector secret in: it is kept in memory, so devices enrol again after a restart; name a file with --collector-secret")
        }
        return (ReferenceServer.secretPath(beside: state), nil)
    }

    /// Whether `path` is in `directory` or under it (both absolute, symbolic links resolved).
    static func isInside(_ path: String, directory: String) -> Bool {
        let base = URL(fileURLWithPath: directory).standardizedFileURL.resolvingSymlinksInPath().path
        let parent = URL(fileURLWithPath: FileSystem.parent(of: URL(fileURLWithPath: path).standardizedFileURL.path))
            .resolvingSymlinksInPath().path
        return parent == base || parent.hasPrefix(base.hasSuffix("/") ? base : base + "/")
    }
}
