import OfflineAgent

/// The body of `GET /stats?app=NAME`: one app's fleet, from every stored report
/// event of it (docs/PROTOCOL.md, "Collector (offline-server)").
struct AppStats: Sendable, Encodable {
    /// Most failure causes listed per version.
    static let topFailureCount = 5
    /// Most versions listed (the newest), besides the publish directory's latest: a
    /// fleet's history, or a sender making versions up, must not grow `/stats` and the
    /// dashboard without end. The rest are summed in `otherVersions`.
    static let maxVersions = 20

    var app: String
    /// Events stored for the app, of any kind.
    var events: Int64 = 0
    /// Distinct devices that sent any event for the app.
    var devices: Int64 = 0
    /// Newest version first (by version order; names that are not versions last, by name).
    var versions: [VersionStats] = []
    var bytesDownloaded: Int64 = 0
    var bytesSaved: Int64 = 0
    /// Sums over the app's `usage` events.
    var offlineHits: Int64 = 0
    /// By reason: `serve`'s reasons (`FallbackReason`) by name, any other summed as `other`.
    var fallbacks: [String: Int64] = [:]
    /// The sums of the versions `versions` leaves out; nil (JSON `null`) when none is.
    var otherVersions: OtherVersions?
    /// The gray switch (0–100) of the publish directory's release; nil (JSON `null`) for
    /// an app it does not have.
    var rollout: Int?
    /// The publish directory's latest version; nil (JSON `null`) for an app it does not have.
    var latest: String?
    /// When the directory's TUF metadata expires, per role, each `soon` in its last
    /// eighth of life (at most 7 days), as `offline-agent status --json` gives a device's;
    /// empty for a directory without metadata.
    var metadata: [TUFExpiryNotice] = []

    /// `offlineHits / (offlineHits + fallbacks)`, nil (JSON `null`) before any usage was counted.
    var offlineHitRatio: Double? {
        let total = fallbacks.values.reduce(offlineHits) { $0.adding(saturating: $1) }
        return total > 0 ? Double(offlineHits) / Double(total) : nil
    }

    /// What the versions `/stats` does not list add up to.
    struct OtherVersions: Sendable, Encodable, Equatable {
        /// How many versions.
        var versions: Int64 = 0
        var devices: Int64 = 0
        var updated: Int64 = 0
        var failed: Int64 = 0
        var rolledBack: Int64 = 0
        var bytesDownloaded: Int64 = 0
        var bytesSaved: Int64 = 0

        mutating func add(_ version: VersionStats) {
            versions += 1
            devices = devices.adding(saturating: version.devices)
            updated = updated.adding(saturating: version.updated)
            failed = failed.adding(saturating: version.failed)
            rolledBack = rolledBack.adding(saturating: version.rolledBack)
            bytesDownloaded = bytesDownloaded.adding(saturating: version.bytesDownloaded)
            bytesSaved = bytesSaved.adding(saturating: version.bytesSaved)
        }
    }

    /// Keeps the `maxVersions` newest versions and `latest` (the version the publish
    /// directory stages or halted), and sums the rest into `otherVersions`.
    mutating func bound(keeping latest: String?) {
        guard versions.count > Self.maxVersions else { return }
        var kept: [VersionStats] = [], other = otherVersions ?? OtherVersions()
        for version in versions {
            if kept.count < Self.maxVersions || version.version == latest { kept.append(version) } else { other.add(version) }
        }
        versions = kept
        otherVersions = other.versions > 0 ? other : nil
    }

    /// One version of the app: every stored event whose `version` is it, and the
    /// rollbacks from it.
    struct VersionStats: Sendable, Encodable {
        var version: String
        /// Devices whose latest move (`updated`, `rolled-back`, `marked-bad`; by `time`, then
        /// arrival) left them on this version.
        var devices: Int64 = 0
        var updated: Int64 = 0
        var failed: Int64 = 0
        /// Rollbacks from this version: `rolled-back` and `marked-bad` events whose
        /// `previousVersion` it is.
        var rolledBack: Int64 = 0
        var topFailures: [Failure] = []
        var bytesDownloaded: Int64 = 0
        var bytesSaved: Int64 = 0
        /// The stage in force now (0–100) when this is the publish directory's latest
        /// version, else nil (JSON `null`): older versions are no longer offered.
        var stage: Int?
        /// The latest version's rollout is halted: its stage in force is 0.
        var halted = false
        /// Why, for a halted version: the reason of the revision that halted it (an
        /// `auto-halt` names the rule and the figures); nil (JSON `null`) otherwise.
        var reason: String?

        /// `updated / (updated + failed)`, nil (JSON `null`) when neither happened.
        var successRate: Double? {
            updated + failed > 0 ? Double(updated) / Double(updated + failed) : nil
        }

        struct Failure: Sendable, Encodable {
            /// The `errorCode` sent; nil (JSON `null`) for failures sent without one.
            var errorCode: String?
            var count: Int64

            enum CodingKeys: String, CodingKey { case errorCode, count }

            func encode(to encoder: any Encoder) throws {
                var container = encoder.container(keyedBy: CodingKeys.self)
                try container.encode(errorCode, forKey: .errorCode)
                try container.encode(count, forKey: .count)
            }
        }

        enum CodingKeys: String, CodingKey {
            case version, devices, updated, failed, rolledBack, successRate, topFailures, bytesDownloaded, bytesSaved
            case stage, halted, reason
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(version, forKey: .version)
            try container.encode(devices, forKey: .devices)
            try container.encode(updated, forKey: .updated)
            try container.encode(failed, forKey: .failed)
            try container.encode(rolledBack, forKey: .rolledBack)
            try container.encode(successRate, forKey: .successRate)
            try container.encode(topFailures, forKey: .topFailures)
            try container.encode(bytesDownloaded, forKey: .bytesDownloaded)
            try container.encode(bytesSaved, forKey: .bytesSaved)
            try container.encode(stage, forKey: .stage)
            try container.encode(halted, forKey: .halted)
            try container.encode(reason, forKey: .reason)
        }

        /// Newest version first; names `Version` cannot read after every version, by name.
        static func newestFirst(_ a: VersionStats, _ b: VersionStats) -> Bool {
            newestFirst((Version(a.version), a.version), (Version(b.version), b.version))
        }

        /// `versions` in `newestFirst` order, each name read as a `Version` once (not once
        /// per comparison: an app may have reported thousands of versions).
        static func sortedNewestFirst(_ versions: some Collection<VersionStats>) -> [VersionStats] {
            versions.map { (key: (Version($0.version), $0.version), stats: $0) }.sorted { newestFirst($0.key, $1.key) }.map(\.stats)
        }

        private static func newestFirst(_ a: (Version?, String), _ b: (Version?, String)) -> Bool {
            switch (a.0, b.0) {
            case let (x?, y?): x != y ? x > y : a.1 < b.1
            case (.some, nil): true
            case (nil, .some): false
            case (nil, nil): a.1 < b.1
            }
        }
    }

    enum CodingKeys: String, CodingKey {
        case app, events, devices, versions, bytesDownloaded, bytesSaved, offlineHits, fallbacks, offlineHitRatio
        case rollout, latest, otherVersions, metadata
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(app, forKey: .app)
        try container.encode(events, forKey: .events)
        try container.encode(devices, forKey: .devices)
        try container.encode(versions, forKey: .versions)
        try container.encode(bytesDownloaded, forKey: .bytesDownloaded)
        try container.encode(bytesSaved, forKey: .bytesSaved)
        try container.encode(offlineHits, forKey: .offlineHits)
        try container.encode(fallbacks, forKey: .fallbacks)
        try container.encode(offlineHitRatio, forKey: .offlineHitRatio)
        try container.encode(rollout, forKey: .rollout)
        try container.encode(latest, forKey: .latest)
        try container.encode(otherVersions, forKey: .otherVersions)
        try container.encode(metadata, forKey: .metadata)
    }
}
