/// What one stored batch adds to the running sums `/stats`, the dashboard and
/// `--auto-halt`'s neighbours read, so that those reads cost what the fleet's size costs
/// (devices, versions), not what its history costs (events).
///
/// Both stores keep the same tables, written in the batch's transaction from this one
/// computation: `version_totals` (per app and version: events, updates, failures,
/// rollbacks, bytes, bytes saved, offline hits, the first and last update's receipt
/// time), `failure_causes` (per app, version and error code), `fallback_totals` (per app
/// and reason) and `devices` (per app and device: where its latest move put it, in
/// arrival order: an `updated`, a `rolled-back` or a `marked-bad`, see
/// `ReportEvent.position`). A device whose latest move changes version adds a row to
/// `version_moves`, the dashboard's adoption chart. A rollback (`rolled-back` or
/// `marked-bad`) counts in `rolledBack` of the version rolled back from, its
/// `previousVersion`.
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

    /// A device's latest move (`ReportEvent.position`). `version` is `none` when the move
    /// left the device on no version (a mark-bad with nothing to go back to); `timeMillis`
    /// is the device's own time of it, kept, never compared.
    struct Latest: Sendable, Equatable {
        var version: String
        var timeMillis: Int64
        var seq: Int64

        /// Later by arrival (`seq`), never by the device's clock: a device sends its queue
        /// oldest first, so arrival is the order its moves happened in, while its clock may
        /// once have been in 2099 (every later move would then count as earlier, for good)
        /// or reset into the past.
        func isAfter(_ other: Latest) -> Bool { seq > other.seq }

        /// Whether this becomes the device's latest over the stored one (nil: none yet).
        func supersedes(_ stored: Latest?) -> Bool { stored.map { isAfter($0) } ?? true }
    }

    /// The version key of events without a version, and the code of failures without one.
    static let none = ""

    /// Events that move a device (`ReportEvent.position`), as SQL.
    private static let moves = "((event = 'updated' AND version IS NOT NULL) OR event IN ('rolled-back', 'marked-bad'))"

    /// Migration `v4` of both stores, in SQL both read alike: a rollback counts against the
    /// version rolled back from, recounted from the stored events (before it, against the
    /// version gone back to, and a `marked-bad` nowhere); then `positionsRecount`.
    static let rollbacksRecount: [String] = [
        "UPDATE version_totals SET rolledBack = 0",
        """
        INSERT INTO version_totals (app, version, events, updated, failed, rolledBack, bytes, bytesSaved, offlineHits)
        SELECT app, COALESCE(previousVersion, ''), 0, 0, 0, COUNT(*), 0, 0, 0 FROM events
        WHERE event IN ('rolled-back', 'marked-bad') GROUP BY app, COALESCE(previousVersion, '')
        ON CONFLICT (app, version) DO UPDATE SET rolledBack = excluded.rolledBack
        """,
    ]

    /// Where each device is and the adoption chart's moves, recounted from the stored
    /// events by `Latest`'s rule (arrival order): part of `v4`, and all of `v8`, which
    /// recounts what `v4` and the ingestion before `v8` had placed by the devices' clocks.
    static let positionsRecount: [String] = [
        "DELETE FROM devices",
        "DELETE FROM version_moves",
        """
        INSERT INTO devices (app, device, version, timeMillis, seq)
        SELECT app, device, version, timeMillis, seq FROM (
            SELECT app, device, COALESCE(version, '') AS version, timeMillis, seq,
                ROW_NUMBER() OVER (PARTITION BY app, device ORDER BY seq DESC) AS rank
            FROM events WHERE \(moves)
        ) latest WHERE rank = 1
        """,
        "INSERT INTO devices (app, device) SELECT DISTINCT app, device FROM events WHERE true ON CONFLICT DO NOTHING",
        """
        INSERT INTO version_moves (app, receivedMillis, version, previous)
        SELECT app, receivedMillis, version, previous FROM (
            SELECT app, receivedMillis, COALESCE(version, '') AS version,
                LAG(COALESCE(version, '')) OVER (PARTITION BY app, device ORDER BY seq) AS previous
            FROM events WHERE \(moves)
        ) moved WHERE previous IS NULL OR previous != version
        """,
    ]

    /// SQL for `stored + added` held at 2^63 − 1, in SQLite and PostgreSQL alike: a plain
    /// `+` overflows into a REAL in SQLite (which GRDB then cannot read back as an integer)
    /// and into an error in PostgreSQL (which refused every later batch of the row).
    static func saturatingSum(_ stored: String, _ added: String) -> String {
        "CASE WHEN \(stored) > \(Int64.max) - \(added) THEN \(Int64.max) ELSE \(stored) + \(added) END"
    }

    var totals: [VersionKey: Totals] = [:]
    var causes: [CauseKey: Int64] = [:]
    var fallbacks: [ReasonKey: Int64] = [:]
    /// The `/metrics` counters' sums (`ReportCounters`), restored from them at start.
    var counters = ReportCounters()
    /// Every device the batch names, with the latest move it brings (nil: none).
    var devices: [DeviceKey: Latest?] = [:]
    /// When the batch was received (ms since 1970).
    var receivedMillis: Int64

    /// The sums of `events` (just stored, each with the sequence number the store gave it).
    init(_ events: [(event: ReportEvent, seq: Int64)], receivedMillis: Int64) {
        self.receivedMillis = receivedMillis
        for (event, seq) in events {
            counters.add(event)
            let key = VersionKey(app: event.app, version: event.version ?? Self.none)
            var sums = totals[key] ?? Totals()
            sums.events += 1
            sums.bytes = sums.bytes.adding(saturating: event.bytes)
            switch event.event {
            case .updated:
                sums.updated += 1
                sums.bytesSaved = sums.bytesSaved.adding(saturating: event.bytesSaved)
                sums.firstUpdated = min(sums.firstUpdated ?? receivedMillis, receivedMillis)
                sums.lastUpdated = max(sums.lastUpdated ?? receivedMillis, receivedMillis)
            case .failed:
                sums.failed += 1
                if let version = event.version {
                    causes[CauseKey(app: event.app, version: version, errorCode: event.errorCode ?? Self.none), default: 0] += 1
                }
            case .usage:
                sums.offlineHits = sums.offlineHits.adding(saturating: event.offlineHits ?? 0)
            default:
                break
            }
            totals[key] = sums
            if event.isRollback {
                // Against the version rolled back from, not the one the device went back to.
                let from = VersionKey(app: event.app, version: event.previousVersion ?? Self.none)
                totals[from, default: Totals()].rolledBack += 1
            }
            for fallback in event.fallbacks {
                let key = ReasonKey(app: event.app, reason: fallback.reason)
                fallbacks[key] = (fallbacks[key] ?? 0).adding(saturating: fallback.count)
            }
            let device = DeviceKey(app: event.app, device: event.device)
            var latest = devices[device] ?? nil
            if let version = event.position {
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
