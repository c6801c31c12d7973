import Foundation
import OfflineAgent
import TestSupport
import Testing

/// Today's store opens the databases the servers before it made (`ReportSchemaHistory`:
/// their schema step by step, written out from their sources), at every step of their
/// history, on SQLite and PostgreSQL: it runs only the steps a database lacks, keeps the
/// records of those it has, and shows every stored event in `/stats`, the dashboard and
/// `/metrics`, recounted from the raw events. A new database gets the schema they made.
@Suite("Fleet reports: databases of every earlier schema open with their history", .serialized)
struct ReportSchemaHistoryTests {
    typealias C = FleetReportClient

    static let all = ["v1", "v2", "v3", "v4", "v5", "v6", "v7"]

    /// The steps today's store runs after them: `v8` recounts where devices are by arrival,
    /// `v9` adds the enrolled ids (`newTables`).
    static let added = ["v8", "v9"]

    /// Tables no older server made.
    static let newTables = ["enrolled_devices"]

    /// A shape's lines without those of `newTables`.
    static func older(_ shape: String) -> String {
        shape.split(separator: "\n", omittingEmptySubsequences: false).filter { line in
            !newTables.contains { line.hasPrefix($0) }
        }.joined(separator: "\n")
    }

    /// The events an older server stored: the batches of `ReportRollupTests`, seed 1.
    static var batches: [[[String: Any]]] { ReportRollupTests.batches(seed: 1) }

    /// `value` as an SQL literal.
    static func literal(_ value: Any?) -> String {
        switch value {
        case nil: "NULL"
        case let number as Int: String(number)
        case let text as String: "'" + text.replacingOccurrences(of: "'", with: "''") + "'"
        default: "NULL"
        }
    }

    /// The raw rows of `batches` (the first event of each id), each batch received a minute
    /// after the one before, fallbacks included: what the older server's inserts wrote.
    static func eventsSQL() -> String {
        var seen = Set<String>()
        var sql = ""
        let columns = ["id", "time", "device", "app", "event", "version", "previousVersion", "via", "bytes", "fullSize",
                       "durationMs", "errorCode", "message", "offlineHits", "periodSeconds"]
        for (index, batch) in batches.enumerated() {
            let received = 1_795_000_000_000 + index * 60_000
            for event in batch where seen.insert(event["id"] as! String).inserted {
                let millis = Int(ISO8601DateFormatter().date(from: event["time"] as! String)!.timeIntervalSince1970 * 1000)
                let values = columns.map { literal(event[$0]) } + [String(millis), String(received)]
                sql += "INSERT INTO events (\(columns.joined(separator: ", ")), timeMillis, receivedMillis) VALUES (\(values.joined(separator: ", ")));\n"
                for (reason, count) in (event["fallbacks"] as? [String: Int] ?? [:]).sorted(by: { $0.key < $1.key }) {
                    sql += "INSERT INTO fallbacks (eventSeq, reason, count) SELECT seq, \(literal(reason)), \(count) FROM events WHERE id = \(literal(event["id"]));\n"
                }
            }
        }
        return sql
    }

    /// A row of sums no event backs: a step that ran again (`v4` sets every `rolledBack`
    /// anew) would change it.
    static let sentinel = """
        INSERT INTO version_totals (app, version, events, updated, failed, rolledBack, bytes, bytesSaved, offlineHits)
        VALUES ('sentinel', '9.9.9', 0, 0, 0, 7, 0, 0, 0);
        """

    /// The script an older server's database at step `last` amounts to: its steps up to
    /// `last`, each recorded as its runner records it, the events stored after `v1`.
    static func script(_ steps: [(name: String, sql: String)], through last: String, record: (String) -> String, withEvents: Bool) -> String {
        var script = ""
        for step in steps {
            script += step.sql + "\n" + record(step.name) + "\n"
            if step.name == "v1", withEvents { script += eventsSQL() }
            if step.name == last { break }
        }
        if withEvents, (steps.firstIndex { $0.name == last } ?? 0) >= (steps.firstIndex { $0.name == "v4" } ?? .max) {
            script += sentinel
        }
        return script
    }

    /// Runs `sql` on the SQLite database at `path` (created if absent), and returns what
    /// the script prints for `query` (rows as lines, columns joined by `|`).
    @discardableResult
    static func sqlite(_ path: String, _ sql: String, query: String = "SELECT 1 WHERE 0") async throws -> String {
        let file = path + ".sql"
        try sql.write(toFile: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: file) }
        let code = """
            import sqlite3, sys
            db = sqlite3.connect(sys.argv[1])
            db.executescript(open(sys.argv[2]).read())
            db.commit()
            for row in db.execute(sys.argv[3]):
                print("|".join("" if v is None else str(v) for v in row))
            """
        let result = try await CLI.run(["-c", code, path, file, query], executable: "/usr/bin/python3")
        try #require(result.status == 0, "\(result.stderr)")
        return result.stdout
    }

    /// Runs `sql` (a script, then `query`) with `psql` on the database at `url`.
    @discardableResult
    static func psql(_ url: String, _ sql: String, query: String = "SELECT 1 WHERE false") async throws -> String {
        let file = NSTemporaryDirectory() + "history-\(UUID().uuidString).sql"
        try (sql + "\n" + query + ";\n").write(toFile: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: file) }
        let result = try await CLI.run([url, "-v", "ON_ERROR_STOP=1", "-qAt", "-f", file], executable: "/usr/bin/psql")
        try #require(result.status == 0, "\(result.stderr)")
        return result.stdout
    }

    /// `/stats` of both apps, the dashboard's table and `/metrics` equal a recount of
    /// `events`; then a second history is posted on top and they still do.
    static func checkFigures(_ store: String, _ when: String) async throws {
        let old = batches.flatMap { $0 }
        try await C.withServer(database: store) { server in
            for (events, moment) in [(old, "as opened"), (old + ReportRollupTests.batches(seed: 2).flatMap { $0 }, "after more batches")] {
                if moment == "after more batches" {
                    for batch in ReportRollupTests.batches(seed: 2) {
                        #expect(try await C.post(server.baseURL, try C.body(batch)).status == 200)
                    }
                }
                for app in ["fleet", "other"] {
                    let shown = ReportRollupTests.figures(try await C.stats(server.baseURL, app: app))
                    let expected = ReportRollupTests.recount(events, app: app)
                    #expect(ReportRollupTests.same(shown, expected), "\(when), \(moment), \(app): /stats \(shown)\nrecount \(expected)")
                }
                let recounted = (ReportRollupTests.recount(events, app: "fleet")["versions"] as! [String: [String: Any]]).mapValues { figures in
                    ["devices", "updated", "failed", "rolledBack"].reduce(into: [String: Int]()) { $0[$1] = figures[$1] as? Int }
                }
                let table = try await ReportRollupTests.dashboardRows(server.baseURL)
                #expect(table == recounted, "\(when), \(moment): dashboard \(table)\nrecount \(recounted)")
                try await ReportCountersTests.expectRecount(server.baseURL, store, "\(when), \(moment)")
            }
        }
    }

    @Test("SQLite: a database at each step v1…v7 keeps its records, runs only the steps it lacks, and shows every event",
          arguments: all)
    func sqlite(last: String) async throws {
        let dir = try PublishFixtures.temporaryDirectory("history-sqlite")
        defer { PublishFixtures.cleanUp(dir) }
        let path = dir + "/reports.sqlite"
        let record = { (name: String) in "INSERT INTO grdb_migrations (identifier) VALUES ('\(name)');" }
        try await Self.sqlite(path, "CREATE TABLE grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY);\n"
            + Self.script(ReportSchemaHistory.sqlite, through: last, record: record, withEvents: true))
        try await Self.checkFigures(path, "SQLite at \(last)")
        let records = try await Self.sqlite(path, "", query: "SELECT identifier FROM grdb_migrations ORDER BY identifier")
        #expect(records == (Self.all + Self.added).map { $0 + "\n" }.joined(), "each step recorded once")
        if last >= "v4" {
            let sentinel = try await Self.sqlite(path, "", query: "SELECT rolledBack FROM version_totals WHERE app = 'sentinel'")
            #expect(sentinel == "7\n", "no step the database had ran again")
        }
    }

    @Test("PostgreSQL: the same at each step v1, v3…v7 (its runner had no v2)",
          .enabled(if: PostgresTestDatabase.isAvailable, "\(PostgresTestDatabase.server.skipReason ?? "")"),
          arguments: ["v1", "v3", "v4", "v5", "v6", "v7"])
    func postgres(last: String) async throws {
        let database = try await PostgresTestDatabase("history")
        defer { database.drop() }
        let record = { (name: String) in
            "INSERT INTO offline_server_migrations (name, appliedAt) VALUES ('\(name)', '2001-01-01T00:00:00Z');"
        }
        try await Self.psql(database.url, """
            CREATE TABLE offline_server_migrations (name TEXT PRIMARY KEY, appliedAt TIMESTAMPTZ NOT NULL DEFAULT now());
            """ + Self.script(ReportSchemaHistory.postgres, through: last, record: record, withEvents: true))
        try await Self.checkFigures(database.url, "PostgreSQL at \(last)")
        let records = try await Self.psql(database.url, "", query: """
            SELECT name || ' ' || (appliedAt < '2002-01-01') FROM offline_server_migrations ORDER BY name
            """)
        let had = ReportSchemaHistory.postgres.map(\.name).prefix { $0 <= last }
        let expected = (ReportSchemaHistory.postgres.map(\.name) + Self.added).map { "\($0) \(had.contains($0) ? "true" : "false")\n" }.joined()
        #expect(records == expected, "each step recorded once, the older records kept")
        if last >= "v4" {
            let sentinel = try await Self.psql(database.url, "", query: "SELECT rolledBack FROM version_totals WHERE app = 'sentinel'")
            #expect(sentinel == "7\n", "no step the database had ran again")
        }
    }

    /// Every table's columns and every index, as SQLite describes them.
    static let sqliteShape = """
        SELECT m.name, m.type, (m.sql LIKE '%WITHOUT ROWID%'), p.name, p.type, p."notnull", p.dflt_value, p.pk
        FROM sqlite_master m JOIN pragma_table_info(m.name) p WHERE m.type = 'table'
        UNION ALL
        SELECT m.name, 'index ' || m.tbl_name, i."unique", c.name, '', 0, NULL, c.seqno
        FROM sqlite_master m JOIN pragma_index_list(m.tbl_name) i ON i.name = m.name JOIN pragma_index_info(m.name) c
        WHERE m.type = 'index'
        ORDER BY 1, 4
        """

    /// Every table's columns and every index, as PostgreSQL describes them.
    static let postgresShape = """
        SELECT table_name, column_name, data_type, is_nullable, column_default FROM information_schema.columns
        WHERE table_schema = 'public' UNION ALL
        SELECT indexname, indexdef, '', '', '' FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1, 2
        """

    @Test("SQLite and PostgreSQL: a new database has the tables, columns, types and indexes the older servers made")
    func newSchema() async throws {
        let dir = try PublishFixtures.temporaryDirectory("history-new")
        defer { PublishFixtures.cleanUp(dir) }
        let old = dir + "/old.sqlite", new = dir + "/new.sqlite"
        try await Self.sqlite(old, "CREATE TABLE grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY);\n"
            + Self.script(ReportSchemaHistory.sqlite, through: "v7", record: { _ in "" }, withEvents: false))
        try await C.withServer(database: new) { _ in }
        let before = try await Self.sqlite(old, "", query: Self.sqliteShape), after = try await Self.sqlite(new, "", query: Self.sqliteShape)
        #expect(before.split(separator: "\n").count > 40)
        #expect(Self.older(after) == before)
        #expect(after.contains("enrolled_devices|"))
        guard PostgresTestDatabase.isAvailable else { return }
        let older = try await PostgresTestDatabase("history_old"), newer = try await PostgresTestDatabase("history_new")
        defer { older.drop(); newer.drop() }
        try await Self.psql(older.url, """
            CREATE TABLE offline_server_migrations (name TEXT PRIMARY KEY, appliedAt TIMESTAMPTZ NOT NULL DEFAULT now());
            """ + Self.script(ReportSchemaHistory.postgres, through: "v7", record: { _ in "" }, withEvents: false))
        try await C.withServer(database: newer.url) { _ in }
        let shown = try await Self.psql(newer.url, "", query: Self.postgresShape), made = try await Self.psql(older.url, "", query: Self.postgresShape)
        #expect(made.split(separator: "\n").count > 40)
        #expect(Self.older(shown) == made)
        #expect(shown.contains("enrolled_devices|"))
    }
}
