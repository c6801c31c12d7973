import OfflineAgent

/// Counter increments of a set of report events, keyed the way `ReportMetrics` names
/// its series: what a batch adds, or (at start) what the whole database adds up to.
/// One function counts both, so a restart never changes what a scrape shows.
///
/// Label values devices choose are bounded, so a buggy or hostile sender cannot grow
/// `/metrics` without end: an `app` the publish directory does not have, a `version` it
/// did not publish for the app (`ReportLabels`), an `errorCode` that is not an
/// `OfflineAgentError.Cause` and a fallback reason that is not a `FallbackReason` count
/// as `other` (`/stats` keeps them as sent); an absent one is `unknown`.
struct ReportTally: Sendable {
    /// Series → increment; a series is a family name and its label values in the family's label order.
    struct Series: Hashable, Sendable {
        var name: String
        var labels: [String]
    }

    private(set) var counts: [Series: Int64] = [:]
    private var labels: ReportLabelCache

    init(labels: ReportLabels) {
        self.labels = ReportLabelCache(labels)
    }
    /// Per app: offline hits and fallbacks, for the hit-ratio gauge.
    private(set) var usage: [String: (hits: Int64, fallbacks: Int64)] = [:]

    var isEmpty: Bool { counts.isEmpty }

    mutating func add(_ event: ReportEvent) {
        add(ReportCounters.Key(event), ReportCounters.Sums(event))
        for fallback in event.fallbacks { addFallbacks(app: event.app, reason: fallback.reason, count: fallback.count) }
    }

    /// Adds the stored sums of one key (`ReportCounters`): what its events added one by
    /// one, as the per-event sums are never negative and saturate alike in any order.
    /// An event kind this server does not know counts nothing.
    mutating func add(_ key: ReportCounters.Key, _ sums: ReportCounters.Sums) {
        guard let event = ReportEvent.Kind(rawValue: key.event) else { return }
        let version = labels.version(key.version.isEmpty ? nil : key.version, app: key.app)
        let app = labels.app(key.app)
        bump(ReportMetrics.Name.events, [app, event.rawValue], sums.events)
        bump(ReportMetrics.Name.downloaded, [app], sums.bytes)
        if ReportEvent.isRollback(event) { bump(ReportMetrics.Name.rollbacks, [app], sums.events) }
        switch event {
        case .updated:
            bump(ReportMetrics.Name.updates, [app, version, ReportEvent.Via(rawValue: key.via)?.rawValue ?? "unknown"], sums.events)
            if sums.bytesSaved > 0 { bump(ReportMetrics.Name.saved, [app], sums.bytesSaved) }
        case .failed:
            bump(ReportMetrics.Name.failures, [app, Self.label(cause: key.errorCode.isEmpty ? nil : key.errorCode)], sums.events)
        case .usage:
            let hits = max(0, sums.offlineHits)
            bump(ReportMetrics.Name.offlineHits, [app], hits)
            usage[app, default: (0, 0)].hits = usage[app, default: (0, 0)].hits.adding(saturating: hits)
        case .deferred, .markedGood, .markedBad, .rolledBack:
            break
        }
    }

    mutating func addFallbacks(app: String, reason: String, count: Int64) {
        let app = labels.app(app)
        bump(ReportMetrics.Name.fallbacks, [app, AppStats.fallbackName(reason)], count)
        usage[app, default: (0, 0)].fallbacks = usage[app, default: (0, 0)].fallbacks.adding(saturating: max(0, count))
    }

    static func label(cause: String?) -> String {
        guard let cause else { return "unknown" }
        return OfflineAgentError.Cause(rawValue: cause) == nil ? "other" : cause
    }

    private mutating func bump(_ name: String, _ labels: [String], _ by: Int64) {
        // A stored number is whatever an older server accepted: below 0 counts nothing.
        let key = Series(name: name, labels: labels)
        counts[key] = (counts[key] ?? 0).adding(saturating: max(0, by))
    }
}
