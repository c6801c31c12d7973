import OfflineAgent

extension AppStats {
    /// `/stats` of `app` from the running sums both stores read (`ReportRollup`), so the
    /// figures and their order are the same whichever store answers; the failure causes
    /// come after (`rankFailures`), read for the versions `bound(keeping:)` lists only.
    /// - Parameters:
    ///   - totals: the rows of `version_totals` of `app`.
    ///   - devices: devices per version of their latest update.
    ///   - reasons: the rows of `fallback_totals` of `app`.
    ///   - knownDevices: devices that sent any event for `app`.
    init(
        app: String, totals: [ReportRollup.VersionKey: ReportRollup.Totals], devices: [(version: String, count: Int64)],
        reasons: [(reason: String, count: Int64)], knownDevices: Int64
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
        self.versions = VersionStats.sortedNewestFirst(versions.values)
        self.devices = knownDevices
        for (reason, count) in reasons {
            let name = Self.fallbackName(reason)
            fallbacks[name] = (fallbacks[name] ?? 0).adding(saturating: count)
        }
    }

    /// Sets `topFailures` of the listed versions from `causes` (rows of `failure_causes`
    /// of the app, in any order; those of versions not listed are left out): per version,
    /// most frequent first, a tie by code in byte order (a failure without a code first).
    mutating func rankFailures(_ causes: [(version: String, errorCode: String, count: Int64)]) {
        var codes: [String: [(errorCode: String, count: Int64)]] = [:]
        for cause in causes { codes[cause.version, default: []].append((cause.errorCode, cause.count)) }
        for index in versions.indices {
            let ranked = (codes[versions[index].version] ?? []).sorted { a, b in
                a.count != b.count ? a.count > b.count : a.errorCode.utf8.lexicographicallyPrecedes(b.errorCode.utf8)
            }
            versions[index].topFailures = ranked.prefix(Self.topFailureCount).map {
                .init(errorCode: $0.errorCode == ReportRollup.none ? nil : $0.errorCode, count: $0.count)
            }
        }
    }

    /// A fallback reason as `/stats` lists it: `serve`'s own by name, any other as `other`
    /// (as `/metrics` counts it), so made-up reasons add one entry at most.
    static func fallbackName(_ reason: String) -> String {
        FallbackReason(rawValue: reason) == nil ? ReportLabels.other : reason
    }
}
