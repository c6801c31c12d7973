import FoundationEssentials
import Hummingbird
import Logging
import OfflineAgent
import OfflineHTTP
import Synchronization

/// The loopback server's part of the version lifecycle (`Lifecycle`): launches counted
/// on `/open` and `/session/restore`, bad versions kept from `/<app>/…`, and the page's
/// own `POST /.offline-agent/mark-good|mark-bad?app=NAME&version=V` on its mirror origin.
final class LocalLifecycle: Sendable {
    static let routePrefix = "/.offline-agent/"

    let lifecycle: Lifecycle
    /// `serve --max-trial-launches`; nil uses the limit the installing sync recorded.
    let maxTrialLaunches: Int?
    /// Per app: the record file's fingerprint and the record read under it, so a file
    /// response or the launch of a confirmed version
    /// costs one `stat` here, or none while nothing changed.
    private let records = Mutex<[String: (fingerprint: FileFingerprint?, record: VersionLifecycle?)]>([:])
    /// Where launches are counted and versions marked: those steps lock, fsync and may
    /// remove a version's tree, which must not hold a thread of the cooperative pool
    /// that every request of the server runs on.
    private let pool = BlockingPool(threads: 1)

    init(store: Store, maxTrialLaunches: Int?) {
        lifecycle = Lifecycle(store: store)
        self.maxTrialLaunches = maxTrialLaunches
    }

    /// Runs a lifecycle step on the pool; it completes even if the request goes away.
    func run<T: Sendable>(_ body: @escaping @Sendable (Lifecycle) throws -> T) async throws -> T {
        let lifecycle = self.lifecycle
        return try await pool.run(.serve, cancellable: false) { try body(lifecycle) }
    }

    /// The app's lifecycle record, read again when its file changed (one `stat`).
    private func record(_ app: String) -> VersionLifecycle? {
        let kept = records.withLock { $0[app] }
        let fingerprint = FileFingerprint(path: lifecycle.recordPath(app))
        let record = kept.flatMap { $0.fingerprint == fingerprint ? $0.record : nil } ?? (fingerprint == nil ? nil : lifecycle.record(app))
        records.withLock { $0[app] = (fingerprint, record) }
        return record
    }

    /// True when `version` of `app` is marked bad (then its files are not served).
    func isBad(_ app: String, _ version: Version) -> Bool {
        record(app)?.isBad(version) ?? false
    }

    /// The version a rollback from the bad `version` of `app` is switching to: the record
    /// names it as soon as the rollback is recorded, before `current` does. Nil when
    /// `version` is not bad, or the record names no other version that is not bad.
    func rollbackTarget(_ app: String, from version: Version) -> Version? {
        guard let record = record(app), record.isBad(version), let target = record.version, target != version,
              !record.isBad(target) else { return nil }
        return target
    }

    /// Counts a launch of the app `resolution` names; a trial version out of launches is
    /// rolled back first (and a rollback left unfinished completes), so the caller
    /// resolves again when this returns true.
    func countLaunch(_ resolution: Resolution, logger: Logger) async -> Bool {
        let app: String
        // The launch is of the version resolved: counted only while it is still the active one.
        let version: Version?
        switch resolution {
        case .file(let file):
            // A confirmed version: nothing to count, no lock to take.
            if record(file.app)?.state(of: file.version) == .good { return false }
            (app, version) = (file.app, file.version)
        case .network(.badVersion, let name?): (app, version) = (name, nil)
        case .network: return false
        }
        do {
            let limit = maxTrialLaunches
            switch try await run({ try $0.recordLaunch(app, version: version, limit: limit) }) {
            case .versionChanged:
                // A sync swapped versions since the resolve: resolve again, count nothing.
                return true
            case .rolledBack(let transition):
                logger.notice("\(app): \(transition.from) rolled back to \(transition.to?.description ?? "none") (not confirmed)")
                return true
            case .counted, .confirmed, .notInstalled:
                if case .network = resolution { return true }
                return false
            }
        } catch {
            logger.error("\(app): cannot count the launch: \(error)")
            return false
        }
    }
}
