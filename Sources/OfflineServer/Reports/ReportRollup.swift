/// What one stored batch adds to the running sums `/stats`, the dashboard and
/// `--auto-halt`'s neighbours read, so that those reads cost what the fleet's size costs
/// (devices, versions), not what its history costs (events).
///
/// Both stores keep the same tables, written in the batch's transaction from this one
/// computation: `version_totals` (per app and version: events, updates, failures,
/// rollbacks, bytes, bytes saved, offline hits, the first and last update's receipt
/// time), `failure_causes` (per app, version and error code), `fallback_totals` (per app
/// and reason) and `devices` (per app and device: the device's latest `updated`, by its
/// own time then arrival order). A device whose latest update changes version adds a row
/// to `version_moves`, the dashboard's adoption chart.
///
/// Events without a version sum under the version `""`, and failures without an error
/// code under the code `""`: the wire format refuses empty strings, so neither is ever
/// a real value, and a key of non-null columns is one row in SQLite and PostgreSQL alike.
struct ReportRollup: Sendable {
    struct VersionKey: Hashable, Comparable, Sendable {
        var app: String
        var version: String
        static func < (a: Self, b: Self) -> Bool { (a.app, a.version) < (b.app, b.version) }
    }

    struct Totals: Sendable {
        var events: Int64 = 0
        var updated: Int64 = 0
        var failed: Int64 = 0
        var rolledBack: Int64 = 0
        var bytes: Int64 = 0
        var bytesSaved: Int64 = 0
        var offlineHits: Int64 = 0
        /// Receipt time of the group's `updated` events (nil: none).
        var firstUpdated: Int64?
        var lastUpdated: Int64?
    }

    struct CauseKey: Hashable, Comparable, Sendable {
        var app: String
        var version: String
        var errorCode: String
        static func < (a: Self, b: Self) -> Bool { (a.app, a.version, a.errorCode) < (b.app, b.version, b.errorCode) }
    }

    struct ReasonKey: Hashable, Comparable, Sendable {
        var app: String
        var reason: String
        static func < (a: Self, b: Self) -> Bool { (a.app, a.reason) < (b.app, b.reason) }
    }

    struct DeviceKey: Hashable, Comparable, Sendable {
        var app: String
        var device: String
        static func < (a: Self, b: Self) -> Bool { (a.app, a.device) < (b.app, b.device) }
    }

    /// A device's latest `updated` event naming a version: what orders "latest".
    struct Latest: Sendable, Equatable {
        var version: String
        var timeMillis: Int64
        var seq: Int64

        /// Later by the device's time, then by arrival.
        func isAfter(_ other: Latest) -> Bool { (timeMillis, seq) > (other.timeMillis, other.seq) }

        /// Whether this becomes the device's latest over the stored one (nil: none yet).
        func supersedes(_ stored: Latest?) -> Bool { stored.map { isAfter($0) } ?? true }
    }

    /// The version key of events without a version, and the code of failures without one.
    static let none = ""

    var totals: [VersionKey: Totals] = [:]
    var causes: [CauseKey: Int64] = [:]
    var fallbacks: [ReasonKey: Int64] = [:]
    /// Every device the batch names, with the latest update it brings (nil: none).
    var devices: [DeviceKey: Latest?] = [:]
    /// When the batch was received (ms since 1970).
    var receivedMillis: Int64

    /// The sums of `events` (just stored, each with the sequence number the store gave it).
    init(_ events: [(event: ReportEvent, seq: Int64)], receivedMillis: Int64) {
        self.receivedMillis = receivedMillis
        for (event, seq) in events {
            let key = VersionKey(app: event.app, version: event.version ?? Self.none)
            var sums = totals[key] ?? Totals()
            sums.events += 1
            sums.bytes &+= event.bytes
            switch event.event {
            case .updated:
                sums.updated += 1
                sums.bytesSaved &+= event.bytesSaved
                sums.firstUpdated = min(sums.firstUpdated ?? receivedMillis, receivedMillis)
                sums.lastUpdated = max(sums.lastUpdated ?? receivedMillis, receivedMillis)
            case .failed:
                sums.failed += 1
                if let version = event.version {
                    causes[CauseKey(app: event.app, version: version, errorCode: event.errorCode ?? Self.none), default: 0] += 1
                }
            case .rolledBack:
                sums.rolledBack += 1
            case .usage:
                sums.offlineHits &+= event.offlineHits ?? 0
            default:
                break
            }
            totals[key] = sums
            for fallback in event.fallbacks {
                fallbacks[ReasonKey(app: event.app, reason: fallback.reason), default: 0] &+= fallback.count
            }
            let device = DeviceKey(app: event.app, device: event.device)
            var latest = devices[device] ?? nil
            if event.event == .updated, let version = event.version {
                let candidate = Latest(version: version, timeMillis: event.timeMillis, seq: seq)
                if candidate.supersedes(latest) { latest = candidate }
            }
            devices[device] = latest
        }
    }

    /// The batch's device updates, sorted (rows are locked in one order by every writer,
    /// so two servers writing the same devices cannot deadlock).
    var updates: [(key: DeviceKey, latest: Latest)] {
        devices.compactMap { key, latest in latest.map { (key, $0) } }.sorted { $0.key < $1.key }
    }
}
