import CoreMetrics
import OfflineHTTP
import Synchronization

/// The fleet counters `GET /metrics` adds when reports are on, recorded through
/// swift-metrics into a registry of their own and appended to the server's exposition.
///
/// Restored from the database when the server starts (`ReportStorage.tally`, from the
/// sums each batch adds in its transaction, `ReportCounters`), then
/// grown by every stored batch, so they count every event ever stored and survive a
/// restart; a duplicate counts nothing. Versions, causes and fallback reasons outside
/// the known ones count as `other` (see `ReportTally`).
///
/// - `offline_server_report_events_total{app,event}` — events stored, by kind.
/// - `offline_server_report_updates_total{app,version,via}` — `updated` events (`via`
///   `patch`, `full` or `unknown` when absent).
/// - `offline_server_report_failures_total{app,cause}` — `failed` events by `errorCode`
///   (`unknown` when absent).
/// - `offline_server_report_rollbacks_total{app}` — `rolled-back` and `marked-bad` events
///   (`ReportEvent.isRollback`, as `/stats` and `--auto-halt` count them).
/// - `offline_server_report_downloaded_bytes_total{app}` — `bytes` of every event.
/// - `offline_server_report_saved_bytes_total{app}` — `fullSize − bytes` of `updated`
///   events `via: patch` that say `fullSize`.
/// - `offline_server_report_offline_hits_total{app}`,
///   `offline_server_report_fallbacks_total{app,reason}` — sums of `usage` events.
/// - `offline_server_report_offline_hit_ratio{app}` (gauge) — hits / (hits + fallbacks).
final class ReportMetrics: Sendable {
    enum Name {
        static let events = "offline_server_report_events_total"
        static let updates = "offline_server_report_updates_total"
        static let failures = "offline_server_report_failures_total"
        static let rollbacks = "offline_server_report_rollbacks_total"
        static let downloaded = "offline_server_report_downloaded_bytes_total"
        static let saved = "offline_server_report_saved_bytes_total"
        static let offlineHits = "offline_server_report_offline_hits_total"
        static let fallbacks = "offline_server_report_fallbacks_total"
        static let hitRatio = "offline_server_report_offline_hit_ratio"
    }

    /// Label names of each family, in the order `ReportTally` gives the values.
    static let labelNames: [String: [String]] = [
        Name.events: ["app", "event"],
        Name.updates: ["app", "version", "via"],
        Name.failures: ["app", "cause"],
        Name.rollbacks: ["app"],
        Name.downloaded: ["app"],
        Name.saved: ["app"],
        Name.offlineHits: ["app"],
        Name.fallbacks: ["app", "reason"],
    ]

    private let registry = ServerMetricsRegistry(help: [
        Name.events: "Fleet report events stored, by app and event.",
        Name.updates: "Updated events, by app, version and via (patch, full, unknown).",
        Name.failures: "Failed events, by app and errorCode (unknown when absent).",
        Name.rollbacks: "Rollbacks (rolled-back and marked-bad events), by app.",
        Name.downloaded: "Bytes devices downloaded, summed over report events.",
        Name.saved: "Bytes patches saved: fullSize - bytes of updated events via patch.",
        Name.offlineHits: "Requests served from the package, summed over usage events.",
        Name.fallbacks: "Requests that fell back to the network, by reason, summed over usage events.",
        Name.hitRatio: "offline hits / (offline hits + fallbacks) over every usage event.",
    ])
    private let usage = Mutex<[String: (hits: Int64, fallbacks: Int64)]>([:])
    /// Each series' value: swift-prometheus wraps a counter past `Int64.max` round to
    /// negative, so a counter is moved by at most what is left below it (it saturates).
    private let totals = Mutex<[ReportTally.Series: Int64]>([:])

    /// Adds a tally: a stored batch, or the database at start.
    func record(_ tally: ReportTally) {
        totals.withLock { totals in
            for (series, count) in tally.counts {
                let before = totals[series] ?? 0
                let after = before.adding(saturating: max(0, count))
                totals[series] = after
                guard after > before else { continue }
                let names = Self.labelNames[series.name] ?? []
                registry.counter(series.name, Array(zip(names, series.labels))).increment(by: after - before)
            }
        }
        guard !tally.usage.isEmpty else { return }
        // Set under the lock: two batches at once must not leave the older ratio behind.
        usage.withLock { usage in
            for (app, added) in tally.usage {
                var total = usage[app] ?? (0, 0)
                total.hits = total.hits.adding(saturating: added.hits)
                total.fallbacks = total.fallbacks.adding(saturating: added.fallbacks)
                usage[app] = total
                let all = total.hits.adding(saturating: total.fallbacks)
                registry.meter(Name.hitRatio, [("app", app)]).set(all > 0 ? Double(total.hits) / Double(all) : 0)
            }
        }
    }

    /// The Prometheus text of these families (sorted like the server's own).
    func prometheusText() -> String { registry.exposition() }
}
