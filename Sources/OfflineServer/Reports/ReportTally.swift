/// Counter increments of a set of report events, keyed the way `ReportMetrics` names
/// its series: what a batch adds, or (at start) what the whole database adds up to.
/// One function counts both, so a restart never changes what a scrape shows.
struct ReportTally: Sendable {
    /// Series → increment; a series is a family name and its label values in the family's label order.
    struct Series: Hashable, Sendable {
        var name: String
        var labels: [String]
    }

    private(set) var counts: [Series: Int64] = [:]
    /// Per app: offline hits and fallbacks, for the hit-ratio gauge.
    private(set) var usage: [String: (hits: Int64, fallbacks: Int64)] = [:]

    var isEmpty: Bool { counts.isEmpty }

    mutating func add(_ event: ReportEvent) {
        add(app: event.app, event: event.event, version: event.version, via: event.via, errorCode: event.errorCode,
            bytes: event.bytes, fullSize: event.fullSize, offlineHits: event.offlineHits)
        for fallback in event.fallbacks { addFallbacks(app: event.app, reason: fallback.reason, count: fallback.count) }
    }

    mutating func add(
        app: String, event: ReportEventKind, version: String?, via: ReportEvent.Via?, errorCode: String?,
        bytes: Int64, fullSize: Int64?, offlineHits: Int64?
    ) {
        bump(ReportMetrics.Name.events, [app, event.rawValue], 1)
        bump(ReportMetrics.Name.downloaded, [app], bytes)
        switch event {
        case .updated:
            bump(ReportMetrics.Name.updates, [app, version ?? "", via?.rawValue ?? "unknown"], 1)
            if via == .patch, let fullSize, fullSize > bytes { bump(ReportMetrics.Name.saved, [app], fullSize - bytes) }
        case .failed:
            bump(ReportMetrics.Name.failures, [app, errorCode ?? "unknown"], 1)
        case .rolledBack:
            bump(ReportMetrics.Name.rollbacks, [app], 1)
        case .usage:
            let hits = offlineHits ?? 0
            bump(ReportMetrics.Name.offlineHits, [app], hits)
            usage[app, default: (0, 0)].hits += hits
        case .deferred, .markedGood, .markedBad:
            break
        }
    }

    mutating func addFallbacks(app: String, reason: String, count: Int64) {
        bump(ReportMetrics.Name.fallbacks, [app, reason], count)
        usage[app, default: (0, 0)].fallbacks += count
    }

    private mutating func bump(_ name: String, _ labels: [String], _ by: Int64) {
        counts[Series(name: name, labels: labels), default: 0] += by
    }
}
