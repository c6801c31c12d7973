import Foundation
import GRDB
import OfflineAgent

/// The fleet report events `offline-server` has accepted, in one SQLite database
/// (WAL mode): an embedded store that survives restarts, read by `/stats` and by the
/// restore of the `/metrics` counters at start.
///
/// `id` has a unique index: an event sent twice (a retry after a lost answer) is
/// stored once, and the second `INSERT OR IGNORE` counts it as a duplicate. A batch
/// is stored in one transaction (with those `ReportWriter` groups with it), so whole or not at all.
final class ReportStore: ReportStorage {
    let path: String
    var location: String { path }
    let pool: DatabasePool

    /// Opens the database at `path` as `init(path:)` does, on a thread of its own (it
    /// creates, migrates and fsyncs), not one of the cooperative pool.
    static func open(path: String) async throws -> ReportStore {
        let pool = BlockingPool(threads: 1)
        do {
            let store = try await pool.run(.serve) { try ReportStore(path: path) }
            await pool.shutdown()
            return store
        } catch {
            await pool.shutdown()
            throw error
        }
    }

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
            throw ServerError(
                .reports, "cannot open the reports database: \(error)", cause: .io, path: path, underlying: error)
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
        // The running sums (`ReportRollup`), filled from the events already stored. Sums of
        // numbers devices sent are TOTALs held at 2^63 − 1: SQLite's SUM stops with an error
        // past it, and a migration that fails would keep the server from starting.
        let total: @Sendable (String) -> String = { "CAST(MIN(TOTAL(\($0)), \(Int64.max)) AS INTEGER)" }
        migrator.registerMigration("v3") { db in
            try db.execute(sql: """
                CREATE TABLE version_totals (
                    app TEXT NOT NULL, version TEXT NOT NULL,
                    events INTEGER NOT NULL, updated INTEGER NOT NULL, failed INTEGER NOT NULL, rolledBack INTEGER NOT NULL,
                    bytes INTEGER NOT NULL, bytesSaved INTEGER NOT NULL, offlineHits INTEGER NOT NULL,
                    firstUpdated INTEGER, lastUpdated INTEGER,
                    PRIMARY KEY (app, version)
                ) WITHOUT ROWID;
                CREATE TABLE failure_causes (
                    app TEXT NOT NULL, version TEXT NOT NULL, errorCode TEXT NOT NULL, count INTEGER NOT NULL,
                    PRIMARY KEY (app, version, errorCode)
                ) WITHOUT ROWID;
                CREATE TABLE fallback_totals (
                    app TEXT NOT NULL, reason TEXT NOT NULL, count INTEGER NOT NULL,
                    PRIMARY KEY (app, reason)
                ) WITHOUT ROWID;
                CREATE TABLE devices (
                    app TEXT NOT NULL, device TEXT NOT NULL, version TEXT, timeMillis INTEGER, seq INTEGER,
                    PRIMARY KEY (app, device)
                ) WITHOUT ROWID;
                CREATE INDEX devices_version ON devices(app, version);
                CREATE TABLE version_moves (
                    app TEXT NOT NULL, receivedMillis INTEGER NOT NULL, version TEXT NOT NULL, previous TEXT
                );
                CREATE INDEX version_moves_app ON version_moves(app, receivedMillis);

                INSERT INTO version_totals
                SELECT app, COALESCE(version, ''), COUNT(*), SUM(event = 'updated'), SUM(event = 'failed'),
                    SUM(event = 'rolled-back'), \(total("bytes")),
                    \(total("CASE WHEN event = 'updated' AND via = 'patch' AND fullSize > bytes THEN fullSize - bytes ELSE 0 END")),
                    \(total("CASE WHEN event = 'usage' THEN COALESCE(offlineHits, 0) ELSE 0 END")),
                    MIN(CASE WHEN event = 'updated' THEN receivedMillis END), MAX(CASE WHEN event = 'updated' THEN receivedMillis END)
                FROM events GROUP BY app, COALESCE(version, '');
                INSERT INTO failure_causes
                SELECT app, version, COALESCE(errorCode, ''), COUNT(*) FROM events
                WHERE event = 'failed' AND version IS NOT NULL GROUP BY app, version, COALESCE(errorCode, '');
                INSERT INTO fallback_totals
                SELECT e.app, f.reason, \(total("f.count")) FROM fallbacks f JOIN events e ON e.seq = f.eventSeq GROUP BY e.app, f.reason;
                INSERT INTO devices
                SELECT app, device, version, timeMillis, seq FROM (
                    SELECT app, device, version, timeMillis, seq,
                        ROW_NUMBER() OVER (PARTITION BY app, device ORDER BY timeMillis DESC, seq DESC) AS rank
                    FROM events WHERE event = 'updated' AND version IS NOT NULL
                ) WHERE rank = 1;
                INSERT OR IGNORE INTO devices (app, device) SELECT DISTINCT app, device FROM events;
                INSERT INTO version_moves
                SELECT app, receivedMillis, version, previous FROM (
                    SELECT app, receivedMillis, version,
                        LAG(version) OVER (PARTITION BY app, device ORDER BY timeMillis, seq) AS previous
                    FROM events WHERE event = 'updated' AND version IS NOT NULL
                ) WHERE previous IS NULL OR previous != version;
                """)
        }
        // Rollbacks against the version rolled back from, devices where their latest move put them.
        migrator.registerMigration("v4") { db in
            for statement in ReportRollup.positionsBackfill { try db.execute(sql: statement) }
        }
        // Whether a device's own credential sent the event (events stored before: no).
        migrator.registerMigration("v5") { db in
            try db.execute(sql: "ALTER TABLE events ADD COLUMN authenticated INTEGER NOT NULL DEFAULT 0")
        }
        // The /metrics counters' sums, so a start reads them instead of every event.
        migrator.registerMigration("v6") { db in
            for statement in ReportCounters.migration(type: "INTEGER", total: total) { try db.execute(sql: statement) }
        }
        // The adoption chart reads the moves of the versions it draws, not every move.
        migrator.registerMigration("v7") { db in
            for statement in AdoptionSeries.movesIndexes { try db.execute(sql: statement) }
        }
        return migrator
    }

    func insert(_ writes: [ReportWrite]) async throws -> [ReportInsertion] {
        let received = Int64((Date().timeIntervalSince1970 * 1000).rounded(.down))
        return try await pool.write { db in
            let insertEvent = try db.cachedStatement(sql: """
                INSERT OR IGNORE INTO events (id, time, timeMillis, device, app, event, version, previousVersion, via,
                    bytes, fullSize, durationMs, errorCode, message, offlineHits, periodSeconds, receivedMillis, authenticated)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """)
            let insertFallback = try db.cachedStatement(sql: "INSERT INTO fallbacks (eventSeq, reason, count) VALUES (?, ?, ?)")
            var results: [ReportInsertion] = []
            var stored: [(event: ReportEvent, seq: Int64)] = []
            for write in writes {
                var result = ReportInsertion(inserted: [], duplicates: 0)
                result.inserted.reserveCapacity(write.events.count)
                for event in write.events {
                    try insertEvent.execute(arguments: [
                        event.id, event.time, event.timeMillis, event.device, event.app, event.event.rawValue, event.version,
                        event.previousVersion, event.via?.rawValue, event.bytes, event.fullSize, event.durationMs,
                        event.errorCode, event.message, event.offlineHits, event.periodSeconds, received, write.authenticated ? 1 : 0,
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
                    stored.append((event, seq))
                }
                results.append(result)
            }
            try Self.add(ReportRollup(stored, receivedMillis: received), to: db)
            return results
        }
    }

    /// Adds a batch's sums to the running ones, in the batch's transaction.
    private static func add(_ rollup: ReportRollup, to db: Database) throws {
        let sum = ReportRollup.saturatingSum
        let totals = try db.cachedStatement(sql: """
            INSERT INTO version_totals (app, version, events, updated, failed, rolledBack, bytes, bytesSaved, offlineHits,
                firstUpdated, lastUpdated)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (app, version) DO UPDATE SET
                events = \(sum("events", "excluded.events")), updated = \(sum("updated", "excluded.updated")),
                failed = \(sum("failed", "excluded.failed")), rolledBack = \(sum("rolledBack", "excluded.rolledBack")),
                bytes = \(sum("bytes", "excluded.bytes")), bytesSaved = \(sum("bytesSaved", "excluded.bytesSaved")),
                offlineHits = \(sum("offlineHits", "excluded.offlineHits")),
                firstUpdated = COALESCE(MIN(firstUpdated, excluded.firstUpdated), firstUpdated, excluded.firstUpdated),
                lastUpdated = COALESCE(MAX(lastUpdated, excluded.lastUpdated), lastUpdated, excluded.lastUpdated)
            """)
        for (key, sums) in rollup.totals.sorted(by: { $0.key < $1.key }) {
            try totals.execute(arguments: [
                key.app, key.version, sums.events, sums.updated, sums.failed, sums.rolledBack, sums.bytes, sums.bytesSaved,
                sums.offlineHits, sums.firstUpdated, sums.lastUpdated,
            ])
        }
        let causes = try db.cachedStatement(sql: """
            INSERT INTO failure_causes (app, version, errorCode, count) VALUES (?, ?, ?, ?)
            ON CONFLICT (app, version, errorCode) DO UPDATE SET count = \(sum("count", "excluded.count"))
            """)
        for (key, count) in rollup.causes.sorted(by: { $0.key < $1.key }) {
            try causes.execute(arguments: [key.app, key.version, key.errorCode, count])
        }
        let fallbacks = try db.cachedStatement(sql: """
            INSERT INTO fallback_totals (app, reason, count) VALUES (?, ?, ?)
            ON CONFLICT (app, reason) DO UPDATE SET count = \(sum("count", "excluded.count"))
            """)
        for (key, count) in rollup.fallbacks.sorted(by: { $0.key < $1.key }) {
            try fallbacks.execute(arguments: [key.app, key.reason, count])
        }
        let counters = try db.cachedStatement(sql: """
            INSERT INTO report_counters (app, event, version, via, errorCode, events, bytes, bytesSaved, offlineHits)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (app, event, version, via, errorCode) DO UPDATE SET \(ReportCounters.upsertSums(table: "report_counters"))
            """)
        for (key, sums) in rollup.counters.sorted {
            try counters.execute(arguments: [
                key.app, key.event, key.version, key.via, key.errorCode, sums.events, sums.bytes, sums.bytesSaved, sums.offlineHits,
            ])
        }
        let known = try db.cachedStatement(sql: "INSERT OR IGNORE INTO devices (app, device) VALUES (?, ?)")
        for key in rollup.devices.keys.sorted() {
            try known.execute(arguments: [key.app, key.device])
        }
        let current = try db.cachedStatement(sql: "SELECT version, timeMillis, seq FROM devices WHERE app = ? AND device = ?")
        let update = try db.cachedStatement(sql: "UPDATE devices SET version = ?, timeMillis = ?, seq = ? WHERE app = ? AND device = ?")
        let move = try db.cachedStatement(sql: "INSERT INTO version_moves (app, receivedMillis, version, previous) VALUES (?, ?, ?, ?)")
        for (key, latest) in rollup.updates {
            let row = try Row.fetchOne(current, arguments: [key.app, key.device])
            let previous: ReportRollup.Latest? = row.flatMap { row in
                (row[0] as String?).map { ReportRollup.Latest(version: $0, timeMillis: row[1], seq: row[2]) }
            }
            guard latest.supersedes(previous) else { continue }
            try update.execute(arguments: [latest.version, latest.timeMillis, latest.seq, key.app, key.device])
            if previous?.version != latest.version {
                try move.execute(arguments: [key.app, rollup.receivedMillis, latest.version, previous?.version])
            }
        }
    }

    /// The counters of every stored event, as `/metrics` shows them, from their stored
    /// sums (`ReportCounters`): one row per key, however many events are stored.
    func tally(labels: ReportLabels) async throws -> ReportTally {
        try await pool.read { db in
            var tally = ReportTally(labels: labels)
            let rows = try Row.fetchCursor(db, sql: """
                SELECT app, event, version, via, errorCode, events, bytes, bytesSaved, offlineHits FROM report_counters
                """)
            while let row = try rows.next() {
                tally.add(
                    ReportCounters.Key(app: row[0], event: row[1], version: row[2], via: row[3], errorCode: row[4]),
                    ReportCounters.Sums(
                        events: Self.count(row, 5), bytes: Self.count(row, 6), bytesSaved: Self.count(row, 7),
                        offlineHits: Self.count(row, 8)))
            }
            let fallbacks = try Row.fetchCursor(db, sql: "SELECT app, reason, count FROM fallback_totals")
            while let row = try fallbacks.next() {
                tally.addFallbacks(app: row[0], reason: row[1], count: Self.count(row, 2))
            }
            return tally
        }
    }

    /// `/stats?app=NAME`, from the running sums of `app` (`ReportRollup`).
    func stats(app: String, keeping latest: String?) async throws -> AppStats {
        try await pool.read { db in
            var totals: [ReportRollup.VersionKey: ReportRollup.Totals] = [:]
            for row in try Row.fetchAll(db, sql: """
                SELECT version, events, updated, failed, rolledBack, bytes, bytesSaved, offlineHits
                FROM version_totals WHERE app = ?
                """, arguments: [app]) {
                var sums = ReportRollup.Totals()
                sums.events = Self.count(row, 1)
                sums.updated = Self.count(row, 2)
                sums.failed = Self.count(row, 3)
                sums.rolledBack = Self.count(row, 4)
                sums.bytes = Self.count(row, 5)
                sums.bytesSaved = Self.count(row, 6)
                sums.offlineHits = Self.count(row, 7)
                totals[ReportRollup.VersionKey(app: app, version: row[0])] = sums
            }
            let devices = try Row.fetchAll(db, sql: """
                SELECT version, COUNT(*) FROM devices WHERE app = ? AND version IS NOT NULL AND version != '' GROUP BY version
                """, arguments: [app]).map { (version: $0[0] as String, count: Self.count($0, 1)) }
            let reasons = try Row.fetchAll(db, sql: "SELECT reason, count FROM fallback_totals WHERE app = ?", arguments: [app])
                .map { (reason: $0[0] as String, count: Self.count($0, 1)) }
            let known = try Int64.fetchOne(db, sql: "SELECT COUNT(*) FROM devices WHERE app = ?", arguments: [app]) ?? 0
            var stats = AppStats(app: app, totals: totals, devices: devices, reasons: reasons, knownDevices: known)
            stats.bound(keeping: latest)
            let listed = stats.versions.map(\.version)
            guard !listed.isEmpty else { return stats }
            let causes = try Row.fetchAll(db, sql: """
                SELECT version, errorCode, count FROM failure_causes WHERE app = ? AND version IN \(Self.list(listed.count))
                """, arguments: [app] + StatementArguments(listed))
                .map { (version: $0[0] as String, errorCode: $0[1] as String, count: Self.count($0, 2)) }
            stats.rankFailures(causes)
            return stats
        }
    }

    func rolloutDevices(app: String, version: String, sinceMillis: Int64, authenticatedOnly: Bool) async throws -> [RolloutFigures.Device] {
        try await pool.read { db in
            let rows = try Row.fetchCursor(db, sql: """
                SELECT device,
                    MAX(event = 'updated' AND version = ?1), MAX(event = 'failed' AND version = ?1),
                    MAX(event IN ('rolled-back', 'marked-bad') AND previousVersion = ?1)
                FROM events
                WHERE app = ?2 AND receivedMillis >= ?3 AND (version = ?1 OR previousVersion = ?1) AND (?4 = 0 OR authenticated = 1)
                GROUP BY device
                """, arguments: [version, app, sinceMillis, authenticatedOnly ? 1 : 0])
            var devices: [RolloutFigures.Device] = []
            while let row = try rows.next() {
                devices.append(.init(id: row[0], updated: (row[1] as Int64?) == 1, failed: (row[2] as Int64?) == 1, rolledBack: (row[3] as Int64?) == 1))
            }
            return devices
        }
    }

    func knownDevices(app: String) async throws -> Int64 {
        try await pool.read { db in
            try Int64.fetchOne(db, sql: "SELECT COUNT(*) FROM devices WHERE app = ?", arguments: [app]) ?? 0
        }
    }

    func adoption(app: String, versions: [String]) async throws -> AdoptionSeries {
        try await pool.read { db in
            guard let range = try Row.fetchOne(db, sql: """
                SELECT MIN(firstUpdated), MAX(lastUpdated) FROM version_totals WHERE app = ?
                """, arguments: [app]), let from = range[0] as Int64?, let to = range[1] as Int64? else { return AdoptionSeries() }
            guard !versions.isEmpty else { return AdoptionSeries(fromMillis: from, toMillis: to, moves: []) }
            // Moves into a listed version, then out of one into another: two index searches
            // (an OR of the two, without ANALYZE's statistics, scans every move of the app).
            let listed = Self.list(versions.count)
            var arguments: StatementArguments = [from, AdoptionSeries.buckets, to, from, app]
            arguments += StatementArguments(versions) + [app] + StatementArguments(versions) + StatementArguments(versions)
            let rows = try Row.fetchAll(db, sql: """
                SELECT (receivedMillis - ?) * ? / (? - ? + 1) AS bucket, version, previous, COUNT(*) FROM (
                    SELECT receivedMillis, version, previous FROM version_moves WHERE app = ? AND version IN \(listed)
                    UNION ALL
                    SELECT receivedMillis, version, previous FROM version_moves WHERE app = ? AND previous IN \(listed) AND version NOT IN \(listed)
                ) moves GROUP BY bucket, version, previous
                """, arguments: arguments)
            let moves = rows.map { AdoptionSeries.Move(bucket: $0[0], version: $0[1], previous: $0[2], count: $0[3]) }
            return AdoptionSeries(fromMillis: from, toMillis: to, moves: moves)
        }
    }

    func close() async {
        try? pool.close()
    }

    /// `(?, ?, …)`: `count` placeholders for `IN`.
    private static func list(_ count: Int) -> String {
        "(" + Array(repeating: "?", count: count).joined(separator: ", ") + ")"
    }

    /// A stored number as a count, never trapping: GRDB's `row[i] as Int64` stops the
    /// process on a REAL it cannot represent, which a sum written by an older server may
    /// be (its `+` overflowed into one). Clamped to `0...Int64.max`; NULL or text is 0.
    private static func count(_ row: Row, _ index: Int) -> Int64 {
        optionalCount(row, index) ?? 0
    }

    private static func optionalCount(_ row: Row, _ index: Int) -> Int64? {
        switch (row[index] as DatabaseValue).storage {
        case .int64(let value): max(0, value)
        case .double(let value): Int64.clamping(stored: value)
        case .null: nil
        case .string, .blob: 0
        }
    }
}
