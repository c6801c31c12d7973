import OfflineAgent

extension AppStats {
    /// `/stats` of `app` from the running sums both stores read (`ReportRollup`), so the
    /// figures and their order are the same whichever store answers.
    /// - Parameters:
    ///   - totals: the rows of `version_totals` of `app`.
    ///   - devices: devices per version of their latest update.
    ///   - causes: the rows of `failure_causes` of `app`, in any order.
    ///   - reasons: the rows of `fallback_totals` of `app`.
    ///   - knownDevices: devices that sent any event for `app`.
    init(
        app: String, totals: [ReportRollup.VersionKey: ReportRollup.Totals], devices: [(version: String, count: Int64)],
        causes: [(version: String, errorCode: String, count: Int64)], reasons: [(reason: String, count: Int64)], knownDevices: Int64
    ) {
        self.init(app: app)
        var versions: [String: VersionStats] = [:]
        for (key, sums) in totals {
            events = events.adding(saturating: sums.events)
            bytesDownloaded = bytesDownloaded.adding(saturating: sums.bytes)
            bytesSaved = bytesSaved.adding(saturating: sums.bytesSaved)
            offlineHits = offlineHits.adding(saturating: sums.offlineHits)
            guard key.version != ReportRollup.none else { continue }
            var stats = VersionStats(version: key.version)
            stats.updated = sums.updated
            stats.failed = sums.failed
            stats.rolledBack = sums.rolledBack
            stats.bytesDownloaded = sums.bytes
            stats.bytesSaved = sums.bytesSaved
            versions[key.version] = stats
        }
        for (version, count) in devices {
            versions[version, default: VersionStats(version: version)].devices = count
        }
        // Most frequent first; a tie by code, byte order (a failure without a code first).
        let ranked = causes.sorted { a, b in
            a.count != b.count ? a.count > b.count : a.errorCode.utf8.lexicographicallyPrecedes(b.errorCode.utf8)
        }
        for cause in ranked where versions[cause.version, default: VersionStats(version: cause.version)].topFailures.count < Self.topFailureCount {
            let code = cause.errorCode == ReportRollup.none ? nil : cause.errorCode
            versions[cause.version, default: VersionStats(version: cause.version)].topFailures.append(.init(errorCode: code, count: cause.count))
        }
        self.versions = versions.values.sorted(by: VersionStats.newestFirst)
        self.devices = knownDevices
        for (reason, count) in reasons {
            let name = Self.fallbackName(reason)
            fallbacks[name] = (fallbacks[name] ?? 0).adding(saturating: count)
        }
    }

    /// A fallback reason as `/stats` lists it: `serve`'s own by name, any other as `other`
    /// (as `/metrics` counts it), so made-up reasons add one entry at most.
    static func fallbackName(_ reason: String) -> String {
        FallbackReason(rawValue: reason) == nil ? ReportLabels.other : reason
    }
}
