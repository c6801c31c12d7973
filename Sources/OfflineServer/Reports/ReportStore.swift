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
        guard !path.isEmpty else { throw ServerError(.usage, "--reports-db is empty: give a SQLite file path or a postgres:// URL") }
        let directory = URL(fileURLWithPath: path).deletingLastPathComponent().path
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            let posix = ((error as NSError).userInfo[NSUnderlyingErrorKey] as? any Error).map { String(cString: strerror(Int32(($0 as NSError).code))) }
            throw ServerError(.reports, "cannot create the reports database's directory \(directory): \(posix ?? "\(error)")", cause: .io, path: path)
        }
        do {
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
            // The cause once, after the path (`ServerError.description`).
            throw ServerError(.reports, "cannot open the reports database", cause: .io, path: path, underlying: error)
        }
    }

    /// `ReportSchema`'s steps, each recorded in `grdb_migrations` by its name.
    private static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        for (name, statements) in ReportSchema.migrations(.sqlite) {
            migrator.registerMigration(name) { db in
                for statement in statements { try db.execute(sql: statement) }
            }
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
        let totals = try db.cachedStatement(sql: ReportSQL.addVersionTotals)
        for (key, sums) in rollup.totals.sorted(by: { $0.key < $1.key }) {
            try totals.execute(arguments: [
                key.app, key.version, sums.events, sums.updated, sums.failed, sums.rolledBack, sums.bytes, sums.bytesSaved,
                sums.offlineHits, sums.firstUpdated, sums.lastUpdated,
            ])
        }
        let causes = try db.cachedStatement(sql: ReportSQL.addFailureCause)
        for (key, count) in rollup.causes.sorted(by: { $0.key < $1.key }) {
            try causes.execute(arguments: [key.app, key.version, key.errorCode, count])
        }
        let fallbacks = try db.cachedStatement(sql: ReportSQL.addFallbackTotal)
        for (key, count) in rollup.fallbacks.sorted(by: { $0.key < $1.key }) {
            try fallbacks.execute(arguments: [key.app, key.reason, count])
        }
        let counters = try db.cachedStatement(sql: ReportSQL.addCounters(from: "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"))
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
            let rows = try Row.fetchCursor(db, sql: ReportSQL.counters)
            while let row = try rows.next() {
                tally.add(
                    ReportCounters.Key(app: row[0], event: row[1], version: row[2], via: row[3], errorCode: row[4]),
                    ReportCounters.Sums(
                        events: Self.count(row, 5), bytes: Self.count(row, 6), bytesSaved: Self.count(row, 7),
                        offlineHits: Self.count(row, 8)))
            }
            let fallbacks = try Row.fetchCursor(db, sql: ReportSQL.fallbackTotals)
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
            for row in try Row.fetchAll(db, sql: ReportSQL.versionTotals, arguments: [app]) {
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
            let devices = try Row.fetchAll(db, sql: ReportSQL.devicesPerVersion, arguments: [app]).map { (version: $0[0] as String, count: Self.count($0, 1)) }
            let reasons = try Row.fetchAll(db, sql: ReportSQL.fallbackReasons, arguments: [app])
                .map { (reason: $0[0] as String, count: Self.count($0, 1)) }
            let known = try Int64.fetchOne(db, sql: ReportSQL.knownDevices, arguments: [app]) ?? 0
            var stats = AppStats(app: app, totals: totals, devices: devices, reasons: reasons, knownDevices: known)
            stats.bound(keeping: latest)
            let listed = stats.versions.map(\.version)
            guard !listed.isEmpty else { return stats }
            let causes = try Row.fetchAll(db, sql: ReportSQL.failureCauses(versions: listed.count), arguments: [app] + StatementArguments(listed))
                .map { (version: $0[0] as String, errorCode: $0[1] as String, count: Self.count($0, 2)) }
            stats.rankFailures(causes)
            return stats
        }
    }

    func rolloutDevices(app: String, version: String, sinceMillis: Int64, authenticatedOnly: Bool) async throws -> [RolloutFigures.Device] {
        try await pool.read { db in
            let rows = try Row.fetchCursor(db, sql: ReportSQL.rolloutDevices, arguments: [
                version, version, version, app, sinceMillis, version, version, authenticatedOnly,
            ])
            var devices: [RolloutFigures.Device] = []
            while let row = try rows.next() {
                devices.append(.init(id: row[0], updated: (row[1] as Int64?) == 1, failed: (row[2] as Int64?) == 1, rolledBack: (row[3] as Int64?) == 1))
            }
            return devices
        }
    }

    func knownDevices(app: String) async throws -> Int64 {
        try await pool.read { db in
            try Int64.fetchOne(db, sql: ReportSQL.knownDevices, arguments: [app]) ?? 0
        }
    }

    func adoption(app: String, versions: [String]) async throws -> AdoptionSeries {
        try await pool.read { db in
            guard let range = try Row.fetchOne(db, sql: ReportSQL.adoptionRange, arguments: [app]), let from = range[0] as Int64?, let to = range[1] as Int64? else { return AdoptionSeries() }
            guard !versions.isEmpty else { return AdoptionSeries(fromMillis: from, toMillis: to, moves: []) }
            var arguments: StatementArguments = [from, AdoptionSeries.buckets, to, from, app]
            arguments += StatementArguments(versions) + [app] + StatementArguments(versions) + StatementArguments(versions)
            let rows = try Row.fetchAll(db, sql: ReportSQL.adoptionMoves(versions: versions.count), arguments: arguments)
            let moves = rows.map { AdoptionSeries.Move(bucket: $0[0], version: $0[1], previous: $0[2], count: $0[3]) }
            return AdoptionSeries(fromMillis: from, toMillis: to, moves: moves)
        }
    }

    func enrol(device: String, fingerprint: String, nowMillis: Int64) async throws -> Bool {
        try await pool.write { db in
            try String.fetchOne(db, sql: ReportSQL.enrol, arguments: [device, fingerprint, nowMillis]) != nil
        }
    }

    func adoptEnrolments(fingerprint: String) async throws {
        try await pool.write { db in try db.execute(sql: ReportSQL.adoptEnrolments, arguments: [fingerprint]) }
    }

    func releaseEnrolment(device: String) async throws -> Bool {
        try await pool.write { db in try String.fetchOne(db, sql: ReportSQL.releaseEnrolment, arguments: [device]) != nil }
    }

    func close() async {
        try? pool.close()
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
