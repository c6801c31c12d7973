import Foundation
import Logging
import OfflineAgent
import NIOSSL
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
        let (configuration, probe, shown) = try configuration(url)
        // One connection first: a database that cannot be reached (no TLS where the URL asks
        // for it, a wrong password, no such database) stops the start at once with one line
        // naming why, where the pool would retry and log for the whole operation timeout.
        let started = ContinuousClock.now
        do {
            try await Self.probe(probe)
        } catch {
            let reason = describe(error, connecting: probe, waited: .now - started)
            throw ServerError(.reports, "cannot open the reports database \(shown): \(reason)", cause: .io)
        }
        let store = PostgresReportStore(location: shown, client: PostgresClient(configuration: configuration, backgroundLogger: logger), logger: logger)
        do {
            try await store.bounded("the migrations", within: Self.migrationTimeout) { try await store.migrate() }
        } catch {
            await store.close()
            throw ServerError(.reports, "cannot open the reports database \(shown): \(describe(error))", cause: .io)
        }
        return store
    }

    /// Connects once and closes, within the connect timeout.
    private static func probe(_ configuration: PostgresConnection.Configuration) async throws {
        let connection = try await PostgresConnection.connect(configuration: configuration, id: 0, logger: Logger(label: "offline-server.probe"))
        try await connection.close()
    }

    /// One line for a failure of the first connection (`probe`), `waited` after it began:
    /// one naming HOST:PORT and why (refused, unreachable, no answer within the connect
    /// timeout) where PostgresNIO says `serverClosedConnection` or a list of attempts.
    static func describe(_ error: any Error, connecting probe: PostgresConnection.Configuration, waited: Duration) -> String {
        guard let psql = error as? PSQLError, psql.code == .connectionError || psql.code == .serverClosedConnection else {
            return describe(error)
        }
        let target = "\(probe.host ?? "?"):\(probe.port.map(String.init) ?? "?")"
        let timeout = probe.options.connectTimeout.nanoseconds / 1_000_000_000
        if waited >= .nanoseconds(probe.options.connectTimeout.nanoseconds) {
            return "cannot connect to \(target): no answer within \(timeout) s (connect_timeout)"
        }
        // The system's reason, from the `(errno: N)` NIO's description of the attempt ends with.
        let text = psql.underlying.map { "\($0)" } ?? ""
        if let range = text.range(of: "errno: "), let code = Int32(text[range.upperBound...].prefix(while: \.isNumber)) {
            return "cannot connect to \(target): \(String(cString: strerror(code)))"
        }
        if psql.code == .serverClosedConnection {
            return "cannot connect to \(target): the connection closed before a database answered"
        }
        if text.contains("UnknownHost") { return "cannot connect to \(target): the host name does not resolve" }
        return "cannot connect to \(target): " + text.split(whereSeparator: \.isNewline).joined(separator: " ")
    }

    /// One line for an error of the database or of reaching it: PostgresNIO's own
    /// description spans lines and names no cause a person can act on.
    static func describe(_ error: any Error) -> String {
        guard let error = error as? PSQLError else { return "\(error)".split(whereSeparator: \.isNewline).joined(separator: " ") }
        switch error.code {
        case .sslUnsupported:
            return "the database server does not offer TLS, which the URL requires (sslmode=require): turn on ssl in the server's postgresql.conf, or use sslmode=disable on a private network"
        case .server:
            let message = error.serverInfo?[.message] ?? "an error"
            let state = error.serverInfo?[.sqlState].map { " (SQLSTATE \($0))" } ?? ""
            return "the database server answered: \(message)\(state)"
        case .connectionError, .failedToAddSSLHandler:
            let cause = error.underlying.map { "\($0)" } ?? "no connection"
            return "cannot connect: \(cause)".split(whereSeparator: \.isNewline).joined(separator: " ")
        case .authMechanismRequiresPassword:
            return "the database server asks for a password, and the URL has none (postgres://USER:PASSWORD@HOST/DB)"
        default:
            let cause = error.underlying.map { ": \($0)" } ?? ""
            return "\(error.code)\(cause)".split(whereSeparator: \.isNewline).joined(separator: " ")
        }
    }

    /// The client configuration of a `postgres://` URL, and the URL without its password.
    static func configuration(_ url: String) throws -> (client: PostgresClient.Configuration, probe: PostgresConnection.Configuration, shown: String) {
        guard let components = URLComponents(string: url), isURL(url), let host = components.host, !host.isEmpty,
              let user = components.user, !user.isEmpty else {
            throw ServerError(.usage, "--reports-db: expected postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE")
        }
        let path = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        let database = path.isEmpty ? nil : path, port = components.port ?? 5432
        // PostgresNIO takes any Int and wraps it: 99999 became 34463.
        guard (1...65535).contains(port) else { throw ServerError(.usage, "--reports-db: port \(port) is outside 1…65535") }
        // libpq's parameters this server honours; any other is refused, not silently ignored.
        var mode = "disable", connectTimeout = 10
        for item in components.queryItems ?? [] {
            switch item.name {
            case "sslmode": mode = item.value ?? ""
            case "connect_timeout":
                guard let seconds = item.value.flatMap({ Int($0) }), (1...600).contains(seconds) else {
                    throw ServerError(.usage, "--reports-db: connect_timeout must be whole seconds, 1 to 600")
                }
                connectTimeout = seconds
            default:
                throw ServerError(.usage, "--reports-db: unknown parameter '\(item.name)' (this server takes sslmode and connect_timeout)")
            }
        }
        let tls: PostgresClient.Configuration.TLS, probeTLS: PostgresConnection.Configuration.TLS
        switch mode {
        case "disable": (tls, probeTLS) = (.disable, .disable)
        case "require": (tls, probeTLS) = (.require(.makeClientConfiguration()), .require(try NIOSSLContext(configuration: .makeClientConfiguration())))
        case "prefer": (tls, probeTLS) = (.prefer(.makeClientConfiguration()), .prefer(try NIOSSLContext(configuration: .makeClientConfiguration())))
        default: throw ServerError(.usage, "--reports-db: sslmode must be disable, prefer or require")
        }
        var configuration = PostgresClient.Configuration(
            host: host, port: port, username: user, password: components.password, database: database, tls: tls)
        // Bounds on a database that does not answer: a report waits at most this, then gets 503.
        configuration.options.connectTimeout = .seconds(connectTimeout)
        configuration.options.maximumConnections = 8
        var probe = PostgresConnection.Configuration(
            host: host, port: port, username: user, password: components.password, database: database, tls: probeTLS)
        probe.options.connectTimeout = .seconds(Int64(connectTimeout))
        var shown = components
        if shown.password != nil { shown.password = "***" }
        return (configuration, probe, shown.string ?? "postgres://")
    }

    func close() async {
        runner.cancel()
        await runner.value
    }

    // MARK: Schema

    /// `ReportSchema`'s steps: each runs once per database, in order, under one advisory
    /// lock, recorded in `offline_server_migrations` by its name.
    private static let migrations = ReportSchema.migrations(.postgres).map { step in
        (name: step.name, sql: step.statements.map { PostgresQuery(unsafeSQL: $0) })
    }

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
    /// and the agent resends later), never a request that hangs. Two minutes: a bound on a
    /// database that stopped, not a speed (a busy machine's pool and locks can hold a query
    /// back for tens of seconds, and the agent's own report deadline ends its wait sooner).
    static let operationTimeout: Duration = .seconds(120)

    /// How long the migrations at start may take: a one-time backfill reads the whole
    /// history (v6 sums every stored event), and another instance sharing the database may
    /// hold the migration lock while it runs its own. Still bounded: a database that
    /// stopped answering fails the start.
    static let migrationTimeout: Duration = .seconds(900)

    /// `work`, or a `reports` error (cause `timeout`) once `limit` has passed.
    private func bounded<T: Sendable>(
        _ what: String, within limit: Duration = operationTimeout, _ work: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask { try await work() }
            group.addTask {
                try await Task.sleep(for: limit)
                return nil
            }
            defer { group.cancelAll() }
            guard let first = try await group.next(), let value = first else {
                throw ServerError(.reports, "the reports database did not answer \(what) within \(limit)", cause: .timeout)
            }
            return value
        }
    }

    func insert(_ writes: [ReportWrite]) async throws -> [ReportInsertion] {
        try await insert(writes, receivedMillis: Int64((Date().timeIntervalSince1970 * 1000).rounded(.down)))
    }

    /// Stores batches as if received at `receivedMillis` (`ReportCopy`: a copied history
    /// keeps its receipt times, which the auto-halt window and the adoption chart read).
    func insert(_ writes: [ReportWrite], receivedMillis: Int64) async throws -> [ReportInsertion] {
        try await bounded("a batch") { try await self.unboundedInsert(writes, received: receivedMillis) }
    }

    func tally(labels: ReportLabels) async throws -> ReportTally {
        try await bounded("the counters") { try await self.unboundedTally(labels: labels) }
    }

    func stats(app: String, keeping latest: String?) async throws -> AppStats {
        try await bounded("/stats") { try await self.unboundedStats(app: app, keeping: latest) }
    }

    func adoption(app: String, versions: [String]) async throws -> AdoptionSeries {
        try await bounded("the adoption chart") { try await self.unboundedAdoption(app: app, versions: versions) }
    }

    func knownDevices(app: String) async throws -> Int64 {
        try await bounded("the auto-halt figures") { try await self.unboundedKnownDevices(app: app) }
    }

    func rolloutDevices(app: String, version: String, sinceMillis: Int64, authenticatedOnly: Bool) async throws -> [RolloutFigures.Device] {
        try await bounded("the auto-halt figures") {
            try await self.unboundedRolloutDevices(app: app, version: version, sinceMillis: sinceMillis, authenticatedOnly: authenticatedOnly)
        }
    }

    // MARK: Writing

    private func unboundedInsert(_ writes: [ReportWrite], received: Int64) async throws -> [ReportInsertion] {
        let logger = self.logger
        let events = writes.flatMap(\.events)
        let authenticated = writes.flatMap { write in write.events.map { _ in write.authenticated } }
        return try await client.withTransaction(logger: logger) { connection in
            // Every event in one statement (a round trip per event made a batch of 10 wait on
            // 10 of them), in order, so `seq` follows arrival as in ReportStore; an id stored
            // before, or earlier in `writes`, inserts nothing and returns no row.
            let text = { (value: (ReportEvent) -> String?) in Self.arrayLiteral(events.map(value)) }
            let number = { (value: (ReportEvent) -> Int64?) in Self.arrayLiteral(events.map { value($0).map(String.init) }) }
            let rows = try await connection.query("""
                INSERT INTO events (id, time, timeMillis, device, app, event, version, previousVersion, via,
                    bytes, fullSize, durationMs, errorCode, message, offlineHits, periodSeconds, receivedMillis, authenticated)
                SELECT id, time, timeMillis, device, app, event, version, previousVersion, via,
                    bytes, fullSize, durationMs, errorCode, message, offlineHits, periodSeconds, \(received), authenticated
                FROM unnest(\(events.map(\.id))::text[], \(events.map(\.time))::text[], \(events.map(\.timeMillis))::bigint[],
                    \(events.map(\.device))::text[], \(events.map(\.app))::text[], \(events.map(\.event.rawValue))::text[],
                    \(text(\.version))::text[], \(text(\.previousVersion))::text[], \(text { $0.via?.rawValue })::text[],
                    \(events.map(\.bytes))::bigint[], \(number(\.fullSize))::bigint[], \(events.map(\.durationMs))::bigint[],
                    \(text(\.errorCode))::text[], \(text(\.message))::text[], \(number(\.offlineHits))::bigint[],
                    \(number(\.periodSeconds))::bigint[], \(authenticated)::boolean[])
                    WITH ORDINALITY AS e(id, time, timeMillis, device, app, event, version, previousVersion, via,
                        bytes, fullSize, durationMs, errorCode, message, offlineHits, periodSeconds, authenticated, position)
                ORDER BY position
                ON CONFLICT (id) DO NOTHING RETURNING id, seq
                """, logger: logger)
            var seqs: [String: Int64] = [:]
            for try await (id, seq) in rows.decode((String, Int64).self) { seqs[id] = seq }
            var results: [ReportInsertion] = []
            var stored: [(event: ReportEvent, seq: Int64)] = []
            for write in writes {
                var result = ReportInsertion(inserted: [], duplicates: 0)
                for event in write.events {
                    // The first event with an id is the one stored.
                    guard let seq = seqs.removeValue(forKey: event.id) else {
                        result.duplicates += 1
                        continue
                    }
                    result.inserted.append(event)
                    stored.append((event, seq))
                }
                results.append(result)
            }
            let fallbacks = stored.flatMap { event, seq in event.fallbacks.map { (seq: seq, reason: $0.reason, count: $0.count) } }
            if !fallbacks.isEmpty {
                try await connection.query("""
                    INSERT INTO fallbacks (eventSeq, reason, count)
                    SELECT * FROM unnest(\(fallbacks.map(\.seq))::bigint[], \(fallbacks.map(\.reason))::text[], \(fallbacks.map(\.count))::bigint[])
                    """, logger: logger)
            }
            try await Self.add(ReportRollup(stored, receivedMillis: received), to: connection, logger: logger)
            return results
        }
    }

    /// Adds a batch's sums to the running ones, in the batch's transaction; rows in key
    /// order, so two instances adding to the same rows wait for each other, never deadlock.
    private static func add(_ rollup: ReportRollup, to connection: PostgresConnection, logger: Logger) async throws {
        for (key, sums) in rollup.totals.sorted(by: { $0.key < $1.key }) {
            var binds = PostgresBindings()
            for value in [key.app, key.version] { binds.append(value) }
            for value in [sums.events, sums.updated, sums.failed, sums.rolledBack, sums.bytes, sums.bytesSaved, sums.offlineHits] {
                binds.append(value)
            }
            binds.append(sums.firstUpdated)
            binds.append(sums.lastUpdated)
            try await connection.query(Self.rendered(ReportSQL.addVersionTotals, binds), logger: logger)
        }
        for (key, count) in rollup.causes.sorted(by: { $0.key < $1.key }) {
            var binds = PostgresBindings()
            for value in [key.app, key.version, key.errorCode] { binds.append(value) }
            binds.append(count)
            try await connection.query(Self.rendered(ReportSQL.addFailureCause, binds), logger: logger)
        }
        for (key, count) in rollup.fallbacks.sorted(by: { $0.key < $1.key }) {
            var binds = PostgresBindings()
            for value in [key.app, key.reason] { binds.append(value) }
            binds.append(count)
            try await connection.query(Self.rendered(ReportSQL.addFallbackTotal, binds), logger: logger)
        }
        // One statement for every key, in key order.
        let counters = rollup.counters.sorted
        if !counters.isEmpty {
            var binds = PostgresBindings()
            for column in [\ReportCounters.Key.app, \.event, \.version, \.via, \.errorCode] { binds.append(counters.map { $0.key[keyPath: column] }) }
            for column in [\ReportCounters.Sums.events, \.bytes, \.bytesSaved, \.offlineHits] { binds.append(counters.map { $0.sums[keyPath: column] }) }
            let rows = "SELECT * FROM unnest(?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::bigint[], ?::bigint[], ?::bigint[], ?::bigint[])"
            try await connection.query(Self.rendered(ReportSQL.addCounters(from: rows), binds), logger: logger)
        }
        // Per app: every device named gets its row, then the rows of those with a newer update
        // are locked, compared and moved (three statements, whatever the batch's size).
        let byApp = Dictionary(grouping: rollup.devices.keys.sorted(), by: \.app)
        let updates = Dictionary(grouping: rollup.updates, by: \.key.app)
        for app in byApp.keys.sorted() {
            let named = byApp[app]!.map(\.device)
            try await connection.query("""
                INSERT INTO devices (app, device) SELECT \(app), unnest(\(named)::text[]) ON CONFLICT DO NOTHING
                """, logger: logger)
            guard let updates = updates[app] else { continue }
            let rows = try await connection.query("""
                SELECT device, version, timeMillis, seq FROM devices
                WHERE app = \(app) AND device = ANY(\(updates.map(\.key.device))::text[]) ORDER BY device FOR UPDATE
                """, logger: logger)
            var stored: [String: ReportRollup.Latest] = [:]
            for try await (device, version, time, seq) in rows.decode((String, String?, Int64?, Int64?).self) {
                if let version, let time, let seq { stored[device] = .init(version: version, timeMillis: time, seq: seq) }
            }
            let changed = updates.filter { $0.latest.supersedes(stored[$0.key.device]) }
            guard !changed.isEmpty else { continue }
            try await connection.query("""
                UPDATE devices d SET version = u.version, timeMillis = u.timeMillis, seq = u.seq
                FROM unnest(\(changed.map(\.key.device))::text[], \(changed.map(\.latest.version))::text[],
                    \(changed.map(\.latest.timeMillis))::bigint[], \(changed.map(\.latest.seq))::bigint[]) AS u(device, version, timeMillis, seq)
                WHERE d.app = \(app) AND d.device = u.device
                """, logger: logger)
            let moves = changed.filter { stored[$0.key.device]?.version != $0.latest.version }
            guard !moves.isEmpty else { continue }
            // unnest gives NULL for nothing reported before: an empty string stands for it in the array.
            try await connection.query("""
                INSERT INTO version_moves (app, receivedMillis, version, previous)
                SELECT \(app), \(rollup.receivedMillis), v, NULLIF(p, '')
                FROM unnest(\(moves.map(\.latest.version))::text[], \(moves.map { stored[$0.key.device]?.version ?? "" })::text[]) AS m(v, p)
                """, logger: logger)
        }
    }

    /// `values` as the text of a PostgreSQL array, nil as `NULL` (PostgresNIO binds no
    /// array of optionals); every element quoted, `"` and `\` escaped, so any text reads back as sent.
    /// Escaped byte by byte: a search for `"` among Characters misses one that a combining
    /// mark follows, and that quote would end the element early.
    static func arrayLiteral(_ values: [String?]) -> String {
        var literal: [UInt8] = [UInt8(ascii: "{")]
        for (index, value) in values.enumerated() {
            if index > 0 { literal.append(UInt8(ascii: ",")) }
            guard let value else {
                literal.append(contentsOf: "NULL".utf8)
                continue
            }
            literal.append(UInt8(ascii: "\""))
            for byte in value.utf8 {
                if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { literal.append(UInt8(ascii: "\\")) }
                literal.append(byte)
            }
            literal.append(UInt8(ascii: "\""))
        }
        literal.append(UInt8(ascii: "}"))
        return String(decoding: literal, as: UTF8.self)
    }

    /// `sql` (`ReportSQL`, `?` placeholders) as PostgreSQL reads it, with `binds` in order.
    private static func rendered(_ sql: String, _ binds: PostgresBindings = PostgresBindings()) -> PostgresQuery {
        PostgresQuery(unsafeSQL: SQLDialect.postgres.render(sql), binds: binds)
    }

    /// The binds of `values`, in order.
    private static func binds(_ values: [String]) -> PostgresBindings {
        var binds = PostgresBindings()
        for value in values { binds.append(value) }
        return binds
    }

    // MARK: Reading

    /// From the counters' stored sums (`ReportCounters`): one row per key, however many events are stored.
    private func unboundedTally(labels: ReportLabels) async throws -> ReportTally {
        var tally = ReportTally(labels: labels)
        let rows = try await client.query(Self.rendered(ReportSQL.counters), logger: logger)
        for try await (app, event, version, via, errorCode, events, bytes, saved, hits)
            in rows.decode((String, String, String, String, String, Int64, Int64, Int64, Int64).self) {
            tally.add(
                ReportCounters.Key(app: app, event: event, version: version, via: via, errorCode: errorCode),
                ReportCounters.Sums(events: events, bytes: bytes, bytesSaved: saved, offlineHits: hits))
        }
        let fallbacks = try await client.query(Self.rendered(ReportSQL.fallbackTotals), logger: logger)
        for try await (app, reason, count) in fallbacks.decode((String, String, Int64).self) {
            tally.addFallbacks(app: app, reason: reason, count: count)
        }
        return tally
    }

    private func unboundedStats(app: String, keeping latest: String?) async throws -> AppStats {
        var totals: [ReportRollup.VersionKey: ReportRollup.Totals] = [:]
        let rows = try await client.query(Self.rendered(ReportSQL.versionTotals, Self.binds([app])), logger: logger)
        for try await (version, events, updated, failed, rolledBack, bytes, saved, hits)
            in rows.decode((String, Int64, Int64, Int64, Int64, Int64, Int64, Int64).self) {
            totals[.init(app: app, version: version)] = .init(
                events: events, updated: updated, failed: failed, rolledBack: rolledBack, bytes: bytes, bytesSaved: saved,
                offlineHits: hits)
        }
        var devices: [(version: String, count: Int64)] = []
        let perVersion = try await client.query(Self.rendered(ReportSQL.devicesPerVersion, Self.binds([app])), logger: logger)
        for try await (version, count) in perVersion.decode((String, Int64).self) { devices.append((version, count)) }
        var reasons: [(reason: String, count: Int64)] = []
        let fallbacks = try await client.query(Self.rendered(ReportSQL.fallbackReasons, Self.binds([app])), logger: logger)
        for try await (reason, count) in fallbacks.decode((String, Int64).self) { reasons.append((reason, count)) }
        let known = try await unboundedKnownDevices(app: app)
        var stats = AppStats(app: app, totals: totals, devices: devices, reasons: reasons, knownDevices: known)
        stats.bound(keeping: latest)
        let listed = stats.versions.map(\.version)
        guard !listed.isEmpty else { return stats }
        var causes: [(version: String, errorCode: String, count: Int64)] = []
        let failures = try await client.query(
            Self.rendered(ReportSQL.failureCauses(versions: listed.count), Self.binds([app] + listed)), logger: logger)
        for try await (version, code, count) in failures.decode((String, String, Int64).self) { causes.append((version, code, count)) }
        stats.rankFailures(causes)
        return stats
    }

    func enrol(device: String, fingerprint: String, nowMillis: Int64) async throws -> Bool {
        try await bounded("the enrolment") {
            var binds = Self.binds([device, fingerprint])
            binds.append(nowMillis)
            return try await self.returnsRow(Self.rendered(ReportSQL.enrol, binds))
        }
    }

    func adoptEnrolments(fingerprint: String) async throws {
        _ = try await bounded("the enrolment") {
            try await self.returnsRow(Self.rendered(ReportSQL.adoptEnrolments, Self.binds([fingerprint])))
        }
    }

    func releaseEnrolment(device: String) async throws -> Bool {
        try await bounded("the enrolment") {
            try await self.returnsRow(Self.rendered(ReportSQL.releaseEnrolment, Self.binds([device])))
        }
    }

    /// Records enrolled ids copied from another database (`ReportCopy`); an id already
    /// recorded here keeps its row. Returns how many were recorded now.
    func addEnrolments(_ rows: [(device: String, secret: String, enrolledMillis: Int64)]) async throws -> Int {
        var added = 0
        // In slices: one statement per 10 000 ids, whatever the fleet's size.
        for start in stride(from: 0, to: rows.count, by: 10_000) {
            let slice = rows[start..<min(rows.count, start + 10_000)]
            added += try await bounded("the enrolments") {
                let inserted = try await self.client.query("""
                    INSERT INTO enrolled_devices (device, secret, enrolledMillis)
                    SELECT * FROM unnest(\(slice.map(\.device))::text[], \(slice.map(\.secret))::text[], \(slice.map(\.enrolledMillis))::bigint[])
                    ON CONFLICT (device) DO NOTHING RETURNING device
                    """, logger: self.logger)
                var count = 0
                for try await _ in inserted { count += 1 }
                return count
            }
        }
        return added
    }

    /// Runs `query`; whether it answered a row.
    private func returnsRow(_ query: PostgresQuery) async throws -> Bool {
        var any = false
        for try await _ in try await client.query(query, logger: logger) { any = true }
        return any
    }

    private func unboundedKnownDevices(app: String) async throws -> Int64 {
        var known: Int64 = 0
        for try await count in try await client.query(Self.rendered(ReportSQL.knownDevices, Self.binds([app])), logger: logger).decode(Int64.self) {
            known = count
        }
        return known
    }

    private func unboundedAdoption(app: String, versions: [String]) async throws -> AdoptionSeries {
        var range: (Int64, Int64)?
        let bounds = try await client.query(Self.rendered(ReportSQL.adoptionRange, Self.binds([app])), logger: logger)
        for try await (from, to) in bounds.decode((Int64?, Int64?).self) {
            if let from, let to { range = (from, to) }
        }
        guard let (from, to) = range else { return AdoptionSeries() }
        guard !versions.isEmpty else { return AdoptionSeries(fromMillis: from, toMillis: to, moves: []) }
        var binds = PostgresBindings()
        for value in [from, Int64(AdoptionSeries.buckets), to, from] { binds.append(value) }
        for value in [app] + versions + [app] + versions + versions { binds.append(value) }
        let rows = try await client.query(Self.rendered(ReportSQL.adoptionMoves(versions: versions.count), binds), logger: logger)
        var moves: [AdoptionSeries.Move] = []
        for try await (bucket, version, previous, count) in rows.decode((Int64, String, String?, Int64).self) {
            moves.append(.init(bucket: Int(bucket), version: version, previous: previous, count: count))
        }
        return AdoptionSeries(fromMillis: from, toMillis: to, moves: moves)
    }

    private func unboundedRolloutDevices(
        app: String, version: String, sinceMillis: Int64, authenticatedOnly: Bool
    ) async throws -> [RolloutFigures.Device] {
        var binds = Self.binds([version, version, version, app])
        binds.append(sinceMillis)
        for value in [version, version] { binds.append(value) }
        binds.append(authenticatedOnly)
        let rows = try await client.query(Self.rendered(ReportSQL.rolloutDevices, binds), logger: logger)
        var devices: [RolloutFigures.Device] = []
        for try await (device, updated, failed, rolledBack) in rows.decode((String, Int64, Int64, Int64).self) {
            devices.append(.init(id: device, updated: updated == 1, failed: failed == 1, rolledBack: rolledBack == 1))
        }
        return devices
    }
}
