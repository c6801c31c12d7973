import Foundation
import GRDB
import OfflineAgent

/// The fleet report events `offline-server` has accepted, in one SQLite database
/// (WAL mode): an embedded store that survives restarts, read by `/stats` and by the
/// restore of the `/metrics` counters at start.
///
/// `id` has a unique index: an event sent twice (a retry after a lost answer) is
/// stored once, and the second `INSERT OR IGNORE` counts it as a duplicate. A batch
/// is one transaction, so it is stored whole or not at all.
final class ReportStore: ReportStorage {
    let path: String
    var location: String { path }
    private let pool: DatabasePool

    /// Opens (creating it and its directory if needed) and migrates the database at `path`.
    init(path: String) throws {
        self.path = path
        do {
            let directory = URL(fileURLWithPath: path).deletingLastPathComponent().path
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            var configuration = Configuration()
            configuration.label = "reports"
            // Another process (a second server, sqlite3) may hold the lock a moment.
            configuration.busyMode = .timeout(5)
            configuration.prepareDatabase { db in
                // WAL + NORMAL: a commit is durable against a process crash; a power cut may lose
                // the last transactions, which the agents then send again (ids de-duplicate).
                try db.execute(sql: "PRAGMA synchronous = NORMAL")
            }
            pool = try DatabasePool(path: path, configuration: configuration)
            try Self.migrator.migrate(pool)
        } catch {
            throw OfflineAgentError(
                .serve, "cannot open the reports database: \(error)", cause: .io, path: path, underlying: error)
        }
    }

    private static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(sql: """
                CREATE TABLE events (
                    seq INTEGER PRIMARY KEY,
                    id TEXT NOT NULL,
                    time TEXT NOT NULL,
                    timeMillis INTEGER NOT NULL,
                    device TEXT NOT NULL,
                    app TEXT NOT NULL,
                    event TEXT NOT NULL,
                    version TEXT,
                    previousVersion TEXT,
                    via TEXT,
                    bytes INTEGER NOT NULL,
                    fullSize INTEGER,
                    durationMs INTEGER NOT NULL,
                    errorCode TEXT,
                    message TEXT,
                    offlineHits INTEGER,
                    periodSeconds INTEGER,
                    receivedMillis INTEGER NOT NULL
                );
                CREATE UNIQUE INDEX events_id ON events(id);
                CREATE INDEX events_app ON events(app, event);
                CREATE TABLE fallbacks (
                    eventSeq INTEGER NOT NULL REFERENCES events(seq),
                    reason TEXT NOT NULL,
                    count INTEGER NOT NULL
                );
                CREATE INDEX fallbacks_event ON fallbacks(eventSeq);
                """)
        }
        // --auto-halt reads one app's recent events about one version.
        migrator.registerMigration("v2") { db in
            try db.execute(sql: "CREATE INDEX events_app_received ON events(app, receivedMillis)")
            // /stats' distinct devices from an index, not the table. (Wider covering indexes for
            // the per-version sums and the devices' update order were measured: they saved
            // /stats little and cost ingestion more than half; bench/fleet.py.)
            try db.execute(sql: "CREATE INDEX events_app_device ON events(app, device)")
        }
        return migrator
    }

    /// Stores a batch in one transaction.
    func insert(_ events: [ReportEvent]) async throws -> ReportInsertion {
        let received = Int64((Date().timeIntervalSince1970 * 1000).rounded(.down))
        return try await pool.write { db in
            let insertEvent = try db.cachedStatement(sql: """
                INSERT OR IGNORE INTO events (id, time, timeMillis, device, app, event, version, previousVersion, via,
                    bytes, fullSize, durationMs, errorCode, message, offlineHits, periodSeconds, receivedMillis)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """)
            let insertFallback = try db.cachedStatement(sql: "INSERT INTO fallbacks (eventSeq, reason, count) VALUES (?, ?, ?)")
            var result = ReportInsertion(inserted: [], duplicates: 0)
            result.inserted.reserveCapacity(events.count)
            for event in events {
                try insertEvent.execute(arguments: [
                    event.id, event.time, event.timeMillis, event.device, event.app, event.event.rawValue, event.version,
                    event.previousVersion, event.via?.rawValue, event.bytes, event.fullSize, event.durationMs,
                    event.errorCode, event.message, event.offlineHits, event.periodSeconds, received,
                ])
                guard db.changesCount == 1 else {
                    result.duplicates += 1
                    continue
                }
                let seq = db.lastInsertedRowID
                for fallback in event.fallbacks {
                    try insertFallback.execute(arguments: [seq, fallback.reason, fallback.count])
                }
                result.inserted.append(event)
            }
            return result
        }
    }

    /// The counters of every stored event, as `/metrics` shows them (the same tally a
    /// batch adds, so a restart changes nothing a scrape sees).
    func tally(labels: ReportLabels) async throws -> ReportTally {
        try await pool.read { db in
            var tally = ReportTally(labels: labels)
            let rows = try Row.fetchCursor(db, sql: "SELECT app, event, version, via, errorCode, bytes, fullSize, offlineHits FROM events")
            while let row = try rows.next() {
                guard let event = ReportEvent.Kind(rawValue: row[1]) else { continue }
                let via: String? = row[3]
                tally.add(
                    app: row[0], event: event, version: row[2], via: via.flatMap(ReportEvent.Via.init(rawValue:)),
                    errorCode: row[4], bytes: row[5], fullSize: row[6], offlineHits: row[7])
            }
            let fallbacks = try Row.fetchCursor(db, sql: """
                SELECT e.app, f.reason, SUM(f.count) FROM fallbacks f JOIN events e ON e.seq = f.eventSeq
                GROUP BY e.app, f.reason
                """)
            while let row = try fallbacks.next() {
                tally.addFallbacks(app: row[0], reason: row[1], count: row[2])
            }
            return tally
        }
    }

    /// `/stats?app=NAME`, from every stored event of `app`.
    func stats(app: String) async throws -> AppStats {
        try await pool.read { db in
            var versions: [String: AppStats.VersionStats] = [:]
            func entry(_ version: String) -> AppStats.VersionStats {
                versions[version] ?? AppStats.VersionStats(version: version)
            }
            // One pass gives the versions' sums and, added up, the app's (the NULL group is the
            // events without a version).
            var result = AppStats(app: app)
            let totals = try Row.fetchAll(db, sql: """
                SELECT version,
                    SUM(event = 'updated'), SUM(event = 'failed'), SUM(event = 'rolled-back'), SUM(bytes),
                    SUM(CASE WHEN event = 'updated' AND via = 'patch' AND fullSize > bytes THEN fullSize - bytes ELSE 0 END),
                    COUNT(*), SUM(CASE WHEN event = 'usage' THEN offlineHits ELSE 0 END)
                FROM events WHERE app = ? GROUP BY version
                """, arguments: [app])
            for row in totals {
                result.events += row[6]
                result.bytesDownloaded += row[4]
                result.bytesSaved += row[5]
                result.offlineHits += (row[7] as Int64?) ?? 0
                guard let version = row[0] as String? else { continue }
                var stats = entry(version)
                stats.updated = row[1]
                stats.failed = row[2]
                stats.rolledBack = row[3]
                stats.bytesDownloaded = row[4]
                stats.bytesSaved = row[5]
                versions[stats.version] = stats
            }
            // A device counts for the version of its latest `updated` event (by time, then arrival).
            let devices = try Row.fetchAll(db, sql: """
                SELECT version, COUNT(*) FROM (
                    SELECT version, ROW_NUMBER() OVER (PARTITION BY device ORDER BY timeMillis DESC, seq DESC) AS rank
                    FROM events WHERE app = ? AND event = 'updated' AND version IS NOT NULL
                ) WHERE rank = 1 GROUP BY version
                """, arguments: [app])
            for row in devices {
                var stats = entry(row[0])
                stats.devices = row[1]
                versions[stats.version] = stats
            }
            let failures = try Row.fetchAll(db, sql: """
                SELECT version, errorCode, COUNT(*) AS n FROM events
                WHERE app = ? AND event = 'failed' AND version IS NOT NULL
                GROUP BY version, errorCode ORDER BY version, n DESC, errorCode
                """, arguments: [app])
            for row in failures {
                var stats = entry(row[0])
                if stats.topFailures.count < AppStats.topFailureCount {
                    stats.topFailures.append(.init(errorCode: row[1], count: row[2]))
                }
                versions[stats.version] = stats
            }
            result.versions = versions.values.sorted(by: AppStats.VersionStats.newestFirst)
            result.devices = try Int64.fetchOne(db, sql: "SELECT COUNT(DISTINCT device) FROM events WHERE app = ?", arguments: [app]) ?? 0
            let reasons = try Row.fetchAll(db, sql: """
                SELECT f.reason, SUM(f.count) FROM fallbacks f JOIN events e ON e.seq = f.eventSeq
                WHERE e.app = ? GROUP BY f.reason ORDER BY f.reason
                """, arguments: [result.app])
            for row in reasons { result.fallbacks[row[0]] = row[1] }
            return result
        }
    }

    func rolloutDevices(app: String, version: String, sinceMillis: Int64) async throws -> [RolloutFigures.Device] {
        try await pool.read { db in
            let rows = try Row.fetchCursor(db, sql: """
                SELECT device,
                    MAX(event = 'updated' AND version = ?1), MAX(event = 'failed' AND version = ?1),
                    MAX(event = 'rolled-back' AND previousVersion = ?1)
                FROM events
                WHERE app = ?2 AND receivedMillis >= ?3 AND (version = ?1 OR previousVersion = ?1)
                GROUP BY device
                """, arguments: [version, app, sinceMillis])
            var devices: [RolloutFigures.Device] = []
            while let row = try rows.next() {
                devices.append(.init(id: row[0], updated: (row[1] as Int64?) == 1, failed: (row[2] as Int64?) == 1, rolledBack: (row[3] as Int64?) == 1))
            }
            return devices
        }
    }

    func adoption(app: String) async throws -> AdoptionSeries {
        try await pool.read { db in
            guard let range = try Row.fetchOne(db, sql: """
                SELECT MIN(receivedMillis), MAX(receivedMillis) FROM events WHERE app = ? AND event = 'updated'
                """, arguments: [app]), let from = range[0] as Int64?, let to = range[1] as Int64? else { return AdoptionSeries() }
            // Only moves between versions: a device re-reporting its version moves nothing.
            let rows = try Row.fetchAll(db, sql: """
                WITH updates AS (
                    SELECT receivedMillis AS at, version,
                        LAG(version) OVER (PARTITION BY device ORDER BY timeMillis, seq) AS previous
                    FROM events WHERE app = ? AND event = 'updated' AND version IS NOT NULL
                )
                SELECT (at - ?) * ? / (? - ? + 1) AS bucket, version, previous, COUNT(*)
                FROM updates WHERE previous IS NULL OR previous != version
                GROUP BY bucket, version, previous
                """, arguments: [app, from, AdoptionSeries.buckets, to, from])
            let moves = rows.map { AdoptionSeries.Move(bucket: $0[0], version: $0[1], previous: $0[2], count: $0[3]) }
            return AdoptionSeries(fromMillis: from, toMillis: to, moves: moves)
        }
    }

    func close() async {
        try? pool.close()
    }
}
