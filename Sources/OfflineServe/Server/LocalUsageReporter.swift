import FoundationEssentials
import Logging
import OfflineAgent
import Synchronization

/// Turns `serve`'s counters into fleet-report `usage` events (docs/PROTOCOL.md, "Fleet
/// reports"): every `interval`, for each app with an active version whose counts moved,
/// one event with the period's offline hits and network fallbacks by reason, for the
/// version active at the flush. The events go to `report`, else to the collector the
/// app's syncs report to; an app with neither sends nothing. Fallbacks of URLs no app's
/// whitelist matched belong to no app and are not reported.
///
/// Each flush also sends whatever else the root's queues hold (lifecycle events of
/// `/open` rollbacks and page marks), within the report deadline.
public final class LocalUsageReporter: Sendable {
    /// The counters read.
    public let metrics: LocalServerMetrics
    /// The collector for every app; nil: each app's own (from its syncs).
    public let report: URL?
    /// The time between flushes (15 minutes by default).
    public let interval: Duration
    private let store: Store
    private let deviceID: String
    private let settings: ReportSettings
    private let logger: Logger
    private let clock: @Sendable () -> Date
    private let pool = BlockingPool(threads: 1)
    /// Counts already reported, per app, and when the period began.
    private let last: Mutex<(counts: [String: [String: Int]], since: ContinuousClock.Instant)>

    /// A reporter over `metrics` of the server of `root`.
    public init(
        metrics: LocalServerMetrics, root: String, report: URL?, interval: Duration = .seconds(15 * 60), deviceID: String? = nil,
        settings: ReportSettings = ReportSettings(), logger: Logger = LocalServer.defaultLogger,
        clock: @escaping @Sendable () -> Date = { Date() }
    ) throws {
        self.metrics = metrics
        self.report = report
        self.interval = max(interval, .seconds(1))
        self.store = Store(root: root)
        self.deviceID = try deviceID ?? DeviceID.load(root: root)
        self.settings = settings
        self.logger = logger
        self.clock = clock
        self.last = Mutex(([:], ContinuousClock.now))
    }

    /// Flushes every `interval` until the task is cancelled, then once more, so the last
    /// period's counts are not lost when the server stops.
    public func run() async {
        while !Task.isCancelled {
            try? await Task.sleep(for: interval)
            if Task.isCancelled { break }
            await flush()
        }
        // Not cancelled itself: a cancelled task's requests would fail at once.
        _ = await Task { await self.flush() }.value
        await pool.shutdown()
    }

    /// Queues the usage events of the period since the last flush and sends the queues.
    @discardableResult
    public func flush() async -> Int {
        let counts = currentCounts()
        let now = ContinuousClock.now
        let (previous, since) = last.withLock { state in
            let old = state
            state = (counts, now)
            return old
        }
        let elapsed = now - since
        let period = max(1, Int(elapsed.components.seconds + (elapsed.components.attoseconds > 0 ? 1 : 0)))
        var queued = 0
        for (app, current) in counts.sorted(by: { $0.key < $1.key }) {
            let before = previous[app] ?? [:]
            var delta: [String: Int] = [:]
            for (key, value) in current where value - (before[key] ?? 0) > 0 { delta[key] = value - (before[key] ?? 0) }
            guard !delta.isEmpty, let url = report ?? ReportDestinations.url(root: store.root, app: app) else { continue }
            let hits = delta.removeValue(forKey: Self.hitsKey) ?? 0
            let event = ReportEvent(
                time: clock(), device: deviceID, app: app, event: .usage, version: store.active(app)?.version.description,
                offlineHits: hits, fallbacks: delta, periodSeconds: period)
            let root = store.root, maxEvents = settings.maxQueuedEvents
            do {
                try await pool.run(.serve, cancellable: false) { try ReportQueue(root: root, url: url, maxEvents: maxEvents).append([event]) }
                queued += 1
            } catch {
                logger.notice("\(app): usage report not queued: \(error)")
            }
        }
        await ReportSender(root: store.root, settings: settings, network: NetworkSettings(), clock: clock, logger: logger, pool: pool).flush()
        return queued
    }

    private static let hitsKey = "\u{0}hits"

    /// Per app with an active version: hits under `hitsKey`, fallbacks by reason.
    private func currentCounts() -> [String: [String: Int]] {
        var counts: [String: [String: Int]] = [:]
        for app in store.apps() {
            var entry = [Self.hitsKey: metrics.offlineHits(app: app)]
            for reason in FallbackReason.allCases {
                let count = metrics.networkFallbacks(app: app, reason: reason)
                if count > 0 { entry[reason.rawValue] = count }
            }
            counts[app] = entry
        }
        return counts
    }
}
