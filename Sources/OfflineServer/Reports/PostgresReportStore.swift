import Foundation
import Logging
import OfflineAgent
import PostgresNIO

/// Fleet report events in PostgreSQL (`--reports-db postgres://USER:PASSWORD@HOST:PORT/DB`),
/// so several `offline-server` instances behind one load balancer are one collector: an
/// event id is stored once whichever instance receives it (a unique index and
/// `ON CONFLICT DO NOTHING`, checked by the database across connections), and `/stats`,
/// the dashboard and `--auto-halt` of every instance read the same rows with the same
/// arithmetic as `ReportStore` (SQLite).
///
/// The schema is migrated at start under an advisory lock, so instances starting together
/// migrate once; each step is recorded in `offline_server_migrations` and skipped after.
///
/// `sslmode=require` in the URL asks for TLS; without it (or with `sslmode=disable`) the
/// connection is plain, as for a database on the same host or a private network.
final class PostgresReportStore: ReportStorage {
    let location: String
    private let client: PostgresClient
    private let runner: Task<Void, Never>
    private let logger: Logger

    /// Whether `location` names PostgreSQL rather than a SQLite path.
    static func isURL(_ location: String) -> Bool {
        location.hasPrefix("postgres://") || location.hasPrefix("postgresql://")
    }

    private init(location: String, client: PostgresClient, logger: Logger) {
        self.location = location
        self.client = client
        self.logger = logger
        runner = Task { await client.run() }
    }

    /// Connects, migrates and returns the store; a `serve` error (cause `io`) when the
    /// database cannot be reached or migrated, naming the URL without its password.
    static func open(url: String, logger: Logger) async throws -> PostgresReportStore {
        let (configuration, shown) = try configuration(url)
        let store = PostgresReportStore(location: shown, client: PostgresClient(configuration: configuration, backgroundLogger: logger), logger: logger)
        do {
            try await store.bounded("the migrations") { try await store.migrate() }
        } catch {
            await store.close()
            throw OfflineAgentError(
                .serve, "cannot open the reports database \(shown): \(String(reflecting: error))", cause: .io, underlying: error)
        }
        return store
    }

    /// The client configuration of a `postgres://` URL, and the URL without its password.
    static func configuration(_ url: String) throws -> (PostgresClient.Configuration, String) {
        guard let components = URLComponents(string: url), isURL(url), let host = components.host, !host.isEmpty,
              let user = components.user, !user.isEmpty else {
            throw OfflineAgentError(.usage, "--reports-db: expected postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE")
        }
        let database = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        let mode = components.queryItems?.first { $0.name == "sslmode" }?.value ?? "disable"
        let tls: PostgresClient.Configuration.TLS
        switch mode {
        case "disable": tls = .disable
        case "require": tls = .require(.makeClientConfiguration())
        case "prefer": tls = .prefer(.makeClientConfiguration())
        default: throw OfflineAgentError(.usage, "--reports-db: sslmode must be disable, prefer or require")
        }
        var configuration = PostgresClient.Configuration(
            host: host, port: components.port ?? 5432, username: user, password: components.password,
            database: database.isEmpty ? nil : database, tls: tls)
        // Bounds on a database that does not answer: a report waits at most this, then gets 503.
        configuration.options.connectTimeout = .seconds(10)
        configuration.options.maximumConnections = 8
        var shown = components
        if shown.password != nil { shown.password = "***" }
        return (configuration, shown.string ?? "postgres://")
    }

    func close() async {
        runner.cancel()
        await runner.value
    }

    // MARK: Schema

    /// Each step runs once per database, in order, under one advisory lock.
    private static let migrations: [(name: String, sql: [PostgresQuery])] = [
        ("v1", [
            """
            CREATE TABLE IF NOT EXISTS events (
                seq BIGSERIAL PRIMARY KEY,
                id TEXT NOT NULL,
                time TEXT NOT NULL,
                timeMillis BIGINT NOT NULL,
                device TEXT NOT NULL,
                app TEXT NOT NULL,
                event TEXT NOT NULL,
                version TEXT,
                previousVersion TEXT,
                via TEXT,
                bytes BIGINT NOT NULL,
                fullSize BIGINT,
                durationMs BIGINT NOT NULL,
                errorCode TEXT,
                message TEXT,
                offlineHits BIGINT,
                periodSeconds BIGINT,
                receivedMillis BIGINT NOT NULL
            )
            """,
            "CREATE UNIQUE INDEX IF NOT EXISTS events_id ON events(id)",
            "CREATE INDEX IF NOT EXISTS events_app ON events(app, event)",
            "CREATE INDEX IF NOT EXISTS events_app_received ON events(app, receivedMillis)",
            // As ReportStore's: /stats' distinct devices from an index.
            "CREATE INDEX IF NOT EXISTS events_app_device ON events(app, device)",
            """
            CREATE TABLE IF NOT EXISTS fallbacks (
                eventSeq BIGINT NOT NULL REFERENCES events(seq),
                reason TEXT NOT NULL,
                count BIGINT NOT NULL
            )
            """,
            "CREATE INDEX IF NOT EXISTS fallbacks_event ON fallbacks(eventSeq)",
        ]),
    ]

    /// An arbitrary constant: the advisory lock every instance takes to migrate.
    private static let migrationLock: Int64 = 0x6f66_666c_696e_65

    private func migrate() async throws {
        let logger = self.logger
        try await client.withConnection { connection in
            try await connection.query("SELECT pg_advisory_lock(\(Self.migrationLock))", logger: logger)
            do {
                try await connection.query(
                    "CREATE TABLE IF NOT EXISTS offline_server_migrations (name TEXT PRIMARY KEY, appliedAt TIMESTAMPTZ NOT NULL DEFAULT now())",
                    logger: logger)
                for migration in Self.migrations {
                    let done = try await connection.query(
                        "SELECT 1 FROM offline_server_migrations WHERE name = \(migration.name)", logger: logger).collect()
                    guard done.isEmpty else { continue }
                    try await connection.withTransaction(logger: logger) { transaction in
                        for statement in migration.sql { try await transaction.query(statement, logger: logger) }
                        try await transaction.query("INSERT INTO offline_server_migrations (name) VALUES (\(migration.name))", logger: logger)
                    }
                }
            } catch {
                _ = try? await connection.query("SELECT pg_advisory_unlock(\(Self.migrationLock))", logger: logger)
                throw error
            }
            try await connection.query("SELECT pg_advisory_unlock(\(Self.migrationLock))", logger: logger)
        }
    }

    // MARK: Bounded

    /// How long one operation may wait for the database (a connection, a lock, a query):
    /// a database that stopped answering turns into an error (`POST /report` answers 503
    /// and the agent resends later), never a request that hangs.
    static let operationTimeout: Duration = .seconds(30)

    /// `work`, or a `serve` error (cause `timeout`) once `operationTimeout` has passed.
    private func bounded<T: Sendable>(_ what: String, _ work: @escaping @Sendable () async throws -> T) async throws -> T {
        try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask { try await work() }
            group.addTask {
                try await Task.sleep(for: Self.operationTimeout)
                return nil
            }
            defer { group.cancelAll() }
            guard let first = try await group.next(), let value = first else {
                throw OfflineAgentError(.serve, "the reports database did not answer \(what) within \(Self.operationTimeout)", cause: .timeout)
            }
            return value
        }
    }

    func insert(_ events: [ReportEvent]) async throws -> ReportInsertion {
        try await bounded("a batch") { try await self.unboundedInsert(events) }
    }

    func tally(labels: ReportLabels) async throws -> ReportTally {
        try await bounded("the counters") { try await self.unboundedTally(labels: labels) }
    }

    func stats(app: String) async throws -> AppStats {
        try await bounded("/stats") { try await self.unboundedStats(app: app) }
    }

    func adoption(app: String) async throws -> AdoptionSeries {
        try await bounded("the adoption chart") { try await self.unboundedAdoption(app: app) }
    }

    func rolloutDevices(app: String, version: String, sinceMillis: Int64) async throws -> [RolloutFigures.Device] {
        try await bounded("the auto-halt figures") {
            try await self.unboundedRolloutDevices(app: app, version: version, sinceMillis: sinceMillis)
        }
    }

    // MARK: Writing

    private func unboundedInsert(_ events: [ReportEvent]) async throws -> ReportInsertion {
        let received = Int64((Date().timeIntervalSince1970 * 1000).rounded(.down))
        let logger = self.logger
        return try await client.withTransaction(logger: logger) { connection in
            var result = ReportInsertion(inserted: [], duplicates: 0)
            for event in events {
                let via = event.via?.rawValue, kind = event.event.rawValue
                let rows = try await connection.query("""
                    INSERT INTO events (id, time, timeMillis, device, app, event, version, previousVersion, via,
                        bytes, fullSize, durationMs, errorCode, message, offlineHits, periodSeconds, receivedMillis)
                    VALUES (\(event.id), \(event.time), \(event.timeMillis), \(event.device), \(event.app), \(kind),
                        \(event.version), \(event.previousVersion), \(via), \(event.bytes), \(event.fullSize),
                        \(event.durationMs), \(event.errorCode), \(event.message), \(event.offlineHits),
                        \(event.periodSeconds), \(received))
                    ON CONFLICT (id) DO NOTHING RETURNING seq
                    """, logger: logger).collect()
                guard let row = rows.first else {
                    result.duplicates += 1
                    continue
                }
                let seq = try row.decode(Int64.self)
                for fallback in event.fallbacks {
                    try await connection.query(
                        "INSERT INTO fallbacks (eventSeq, reason, count) VALUES (\(seq), \(fallback.reason), \(fallback.count))",
                        logger: logger)
                }
                result.inserted.append(event)
            }
            return result
        }
    }

    // MARK: Reading

    private func unboundedTally(labels: ReportLabels) async throws -> ReportTally {
        var tally = ReportTally(labels: labels)
        let rows = try await client.query(
            "SELECT app, event, version, via, errorCode, bytes, fullSize, offlineHits FROM events ORDER BY seq", logger: logger)
        for try await (app, event, version, via, errorCode, bytes, fullSize, offlineHits)
            in rows.decode((String, String, String?, String?, String?, Int64, Int64?, Int64?).self) {
            guard let kind = ReportEvent.Kind(rawValue: event) else { continue }
            tally.add(
                app: app, event: kind, version: version, via: via.flatMap(ReportEvent.Via.init(rawValue:)),
                errorCode: errorCode, bytes: bytes, fullSize: fullSize, offlineHits: offlineHits)
        }
        let fallbacks = try await client.query("""
            SELECT e.app, f.reason, SUM(f.count)::BIGINT FROM fallbacks f JOIN events e ON e.seq = f.eventSeq
            GROUP BY e.app, f.reason
            """, logger: logger)
        for try await (app, reason, count) in fallbacks.decode((String, String, Int64).self) {
            tally.addFallbacks(app: app, reason: reason, count: count)
        }
        return tally
    }

    private func unboundedStats(app: String) async throws -> AppStats {
        var versions: [String: AppStats.VersionStats] = [:]
        func entry(_ version: String) -> AppStats.VersionStats {
            versions[version] ?? AppStats.VersionStats(version: version)
        }
        // One pass gives the versions' sums and, added up, the app's (the NULL group is the
        // events without a version), as in ReportStore.
        var result = AppStats(app: app)
        let totals = try await client.query("""
            SELECT version,
                COUNT(*) FILTER (WHERE event = 'updated'), COUNT(*) FILTER (WHERE event = 'failed'),
                COUNT(*) FILTER (WHERE event = 'rolled-back'), COALESCE(SUM(bytes), 0)::BIGINT,
                COALESCE(SUM(CASE WHEN event = 'updated' AND via = 'patch' AND fullSize > bytes THEN fullSize - bytes ELSE 0 END), 0)::BIGINT,
                COUNT(*), COALESCE(SUM(CASE WHEN event = 'usage' THEN offlineHits ELSE 0 END), 0)::BIGINT
            FROM events WHERE app = \(app) GROUP BY version
            """, logger: logger)
        for try await (version, updated, failed, rolledBack, bytes, saved, count, hits)
            in totals.decode((String?, Int64, Int64, Int64, Int64, Int64, Int64, Int64).self) {
            result.events += count
            result.bytesDownloaded += bytes
            result.bytesSaved += saved
            result.offlineHits += hits
            guard let version else { continue }
            var stats = entry(version)
            stats.updated = updated
            stats.failed = failed
            stats.rolledBack = rolledBack
            stats.bytesDownloaded = bytes
            stats.bytesSaved = saved
            versions[version] = stats
        }
        // A device counts for the version of its latest `updated` event (by time, then arrival).
        let devices = try await client.query("""
            SELECT version, COUNT(*) FROM (
                SELECT version, ROW_NUMBER() OVER (PARTITION BY device ORDER BY timeMillis DESC, seq DESC) AS rank
                FROM events WHERE app = \(app) AND event = 'updated' AND version IS NOT NULL
            ) latest WHERE rank = 1 GROUP BY version
            """, logger: logger)
        for try await (version, count) in devices.decode((String, Int64).self) {
            var stats = entry(version)
            stats.devices = count
            versions[version] = stats
        }
        // Ordered like SQLite's: NULL codes sort first there, so NULLS FIRST here.
        let failures = try await client.query("""
            SELECT version, errorCode, COUNT(*) AS n FROM events
            WHERE app = \(app) AND event = 'failed' AND version IS NOT NULL
            GROUP BY version, errorCode ORDER BY version, n DESC, errorCode COLLATE "C" NULLS FIRST
            """, logger: logger)
        for try await (version, errorCode, count) in failures.decode((String, String?, Int64).self) {
            var stats = entry(version)
            if stats.topFailures.count < AppStats.topFailureCount {
                stats.topFailures.append(.init(errorCode: errorCode, count: count))
            }
            versions[version] = stats
        }
        result.versions = versions.values.sorted(by: AppStats.VersionStats.newestFirst)
        let distinct = try await client.query("SELECT COUNT(DISTINCT device) FROM events WHERE app = \(app)", logger: logger)
        for try await count in distinct.decode(Int64.self) { result.devices = count }
        let reasons = try await client.query("""
            SELECT f.reason, SUM(f.count)::BIGINT FROM fallbacks f JOIN events e ON e.seq = f.eventSeq
            WHERE e.app = \(app) GROUP BY f.reason
            """, logger: logger)
        for try await (reason, count) in reasons.decode((String, Int64).self) { result.fallbacks[reason] = count }
        return result
    }

    private func unboundedAdoption(app: String) async throws -> AdoptionSeries {
        var range: (Int64, Int64)?
        let bounds = try await client.query("""
            SELECT MIN(receivedMillis), MAX(receivedMillis) FROM events WHERE app = \(app) AND event = 'updated'
            """, logger: logger)
        for try await (from, to) in bounds.decode((Int64?, Int64?).self) {
            if let from, let to { range = (from, to) }
        }
        guard let (from, to) = range else { return AdoptionSeries() }
        let buckets = Int64(AdoptionSeries.buckets)
        // The same arithmetic as ReportStore's (bigint division truncates as SQLite's does).
        let rows = try await client.query("""
            WITH updates AS (
                SELECT receivedMillis AS at, version,
                    LAG(version) OVER (PARTITION BY device ORDER BY timeMillis, seq) AS previous
                FROM events WHERE app = \(app) AND event = 'updated' AND version IS NOT NULL
            )
            SELECT (at - \(from)) * \(buckets) / (\(to) - \(from) + 1) AS bucket, version, previous, COUNT(*)
            FROM updates WHERE previous IS NULL OR previous != version
            GROUP BY bucket, version, previous
            """, logger: logger)
        var moves: [AdoptionSeries.Move] = []
        for try await (bucket, version, previous, count) in rows.decode((Int64, String, String?, Int64).self) {
            moves.append(.init(bucket: Int(bucket), version: version, previous: previous, count: count))
        }
        return AdoptionSeries(fromMillis: from, toMillis: to, moves: moves)
    }

    private func unboundedRolloutDevices(app: String, version: String, sinceMillis: Int64) async throws -> [RolloutFigures.Device] {
        let rows = try await client.query("""
            SELECT device,
                BOOL_OR(event = 'updated' AND version = \(version)), BOOL_OR(event = 'failed' AND version = \(version)),
                BOOL_OR(event = 'rolled-back' AND previousVersion = \(version))
            FROM events
            WHERE app = \(app) AND receivedMillis >= \(sinceMillis) AND (version = \(version) OR previousVersion = \(version))
            GROUP BY device
            """, logger: logger)
        var devices: [RolloutFigures.Device] = []
        for try await (device, updated, failed, rolledBack) in rows.decode((String, Bool?, Bool?, Bool?).self) {
            devices.append(.init(id: device, updated: updated == true, failed: failed == true, rolledBack: rolledBack == true))
        }
        return devices
    }
}
