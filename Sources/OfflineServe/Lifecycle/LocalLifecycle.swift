import FoundationEssentials
import Hummingbird
import Logging
import OfflineAgent
import OfflineHTTP
import Synchronization

/// The loopback server's part of the version lifecycle (`Lifecycle`): launches counted
/// on `/open` and `/session/restore`, bad versions kept from `/<app>/…`, and the page's
/// own `POST /.offline-agent/mark-good|mark-bad?app=NAME`.
final class LocalLifecycle: Sendable {
    static let routePrefix = "/.offline-agent/"

    let lifecycle: Lifecycle
    /// `serve --max-trial-launches`; nil uses the limit the installing sync recorded.
    let maxTrialLaunches: Int?
    /// Per app: the record file's fingerprint, the record read under it, and the watch
    /// generation it holds for, so a file response or the launch of a confirmed version
    /// costs one `stat` here, or none while nothing changed.
    private let records = Mutex<[String: (fingerprint: FileFingerprint?, record: VersionLifecycle?, generation: UInt64?)]>([:])
    private let watch: LocalStoreWatch
    /// Where launches are counted and versions marked: those steps lock, fsync and may
    /// remove a version's tree, which must not hold a thread of the cooperative pool
    /// that every request of the server runs on.
    private let pool = BlockingPool(threads: 1)

    init(store: Store, maxTrialLaunches: Int?, watch: LocalStoreWatch) {
        lifecycle = Lifecycle(store: store)
        self.maxTrialLaunches = maxTrialLaunches
        self.watch = watch
    }

    /// Runs a lifecycle step on the pool; it completes even if the request goes away.
    func run<T: Sendable>(_ body: @escaping @Sendable (Lifecycle) throws -> T) async throws -> T {
        let lifecycle = self.lifecycle
        return try await pool.run(.serve, cancellable: false) { try body(lifecycle) }
    }

    /// The app's lifecycle record, read again when its file changed; while the app's
    /// directory has no event (`LocalStoreWatch`), the kept one without a `stat`.
    private func record(_ app: String, generation now: UInt64? = nil) -> VersionLifecycle? {
        let kept = records.withLock { $0[app] }
        if let kept, let generation = kept.generation, generation == now ?? watch.generation() { return kept.record }
        // Watched before the file is looked at: a change from here on is an event.
        let watched = watch.watch(appsDirectory: "\(lifecycle.store.root)/apps", apps: [app])
        let generation = watch.generation()
        let fingerprint = FileFingerprint(path: lifecycle.recordPath(app))
        let record = kept.flatMap { $0.fingerprint == fingerprint ? $0.record : nil } ?? (fingerprint == nil ? nil : lifecycle.record(app))
        records.withLock { $0[app] = (fingerprint, record, watched ? generation : nil) }
        return record
    }

    /// True when `app`'s kept record holds for `generation` (no check is made on a request
    /// while the generation is unchanged).
    func holds(_ app: String, at generation: UInt64) -> Bool {
        records.withLock { $0[app]?.generation == generation }
    }

    /// True when `version` of `app` is marked bad (then its files are not served).
    /// `generation`: the watch's, read earlier in the same request.
    func isBad(_ app: String, _ version: Version, generation: UInt64? = nil) -> Bool {
        record(app, generation: generation)?.isBad(version) ?? false
    }

    /// Counts a launch of the app `resolution` names; a trial version out of launches is
    /// rolled back first (and a rollback left unfinished completes), so the caller
    /// resolves again when this returns true.
    func countLaunch(_ resolution: Resolution, logger: Logger) async -> Bool {
        let app: String
        switch resolution {
        case .file(let file):
            // A confirmed version: nothing to count, no lock to take.
            if record(file.app)?.state(of: file.version) == .good { return false }
            app = file.app
        case .network(.badVersion, let name?): app = name
        case .network: return false
        }
        do {
            let limit = maxTrialLaunches
            switch try await run({ try $0.recordLaunch(app, limit: limit) }) {
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
