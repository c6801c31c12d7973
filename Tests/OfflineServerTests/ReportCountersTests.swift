import Foundation
import OfflineAgent
import TestSupport
import Testing

/// A start restores the `/metrics` fleet counters from sums kept at ingestion
/// (`ReportCounters`), not from every stored event. These tests hold `/metrics` to a
/// recount of the events the database holds, made here from its raw rows with the rules
/// docs/PROTOCOL.md gives: after ingestion, after a start that fills the sums of a
/// database made before they existed (with saturating numbers an older server let in),
/// and after a plain restart.
@Suite("Fleet reports: /metrics equals a recount of the stored events", .serialized)
struct ReportCountersTests {
    typealias C = FleetReportClient

    static let published: Set<String> = ["1.0.0", "2.0.0", "2.1.0"]

    /// The raw rows: events (numbers as text) and fallbacks with their event's app.
    static func rows(_ store: String) async throws -> (events: [[String: String?]], fallbacks: [[String: String?]]) {
        let output: String
        if store.hasPrefix("postgres") {
            let text = { (column: String) in "'\(column)', \(column)::text" }
            let sql = """
                SELECT json_build_object(
                    'events', COALESCE((SELECT json_agg(json_build_object(\(["app", "event", "version", "via", "errorCode", "bytes", "fullSize", "offlineHits"].map(text).joined(separator: ", ")))) FROM events), '[]'),
                    'fallbacks', COALESCE((SELECT json_agg(json_build_object('app', e.app, 'reason', f.reason, 'count', f.count::text))
                        FROM fallbacks f JOIN events e ON e.seq = f.eventSeq), '[]'))
                """
            let result = try await CLI.run([store, "-v", "ON_ERROR_STOP=1", "-qAtc", sql], executable: "/usr/bin/psql")
            try #require(result.status == 0, "\(result.stderr)")
            output = result.stdout
        } else {
            let script = """
                import json, sqlite3, sys
                db = sqlite3.connect(sys.argv[1])
                def rows(sql):
                    cursor = db.execute(sql)
                    names = [d[0] for d in cursor.description]
                    return [{n: (v if v is None or isinstance(v, str) else str(v)) for n, v in zip(names, row)} for row in cursor]
                print(json.dumps({
                    "events": rows("SELECT app, event, version, via, errorCode, bytes, fullSize, offlineHits FROM events"),
                    "fallbacks": rows("SELECT e.app, f.reason, f.count FROM fallbacks f JOIN events e ON e.seq = f.eventSeq"),
                }))
                """
            let result = try await CLI.run(["-c", script, store], executable: "/usr/bin/python3")
            try #require(result.status == 0, "\(result.stderr)")
            output = result.stdout
        }
        let object = try #require(try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String: Any])
        let table = { (name: String) in
            (object[name] as? [[String: Any]] ?? []).map { $0.mapValues { $0 as? String } }
        }
        return (table("events"), table("fallbacks"))
    }

    static func add(_ a: Int64, _ b: Int64) -> Int64 {
        let (sum, overflow) = a.addingReportingOverflow(b)
        return overflow ? .max : sum
    }

    /// Series (`name{label=value,…}`, labels sorted) → value, as the rules give them from
    /// the rows; series whose value is 0 are left out (`/metrics` shows none).
    static func recount(_ store: String) async throws -> [String: Double] {
        let (events, fallbacks) = try await rows(store)
        var counts: [String: Int64] = [:]
        var usage: [String: (hits: Int64, all: Int64)] = [:]
        func bump(_ name: String, _ labels: [String: String], _ by: Int64) {
            let key = name + "{" + labels.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ",") + "}"
            counts[key] = add(counts[key] ?? 0, max(0, by))
        }
        let number = { (row: [String: String?], name: String) in (row[name] ?? nil).flatMap { Int64($0) } }
        for row in events {
            let app = row["app"]! == "fleet" ? "fleet" : "other", event = row["event"]!!
            let bytes = number(row, "bytes") ?? 0
            bump("offline_server_report_events_total", ["app": app, "event": event], 1)
            bump("offline_server_report_downloaded_bytes_total", ["app": app], bytes)
            switch event {
            case "updated":
                let version = (row["version"] ?? nil).map { app == "fleet" && published.contains($0) ? $0 : "other" } ?? "unknown"
                let via = (row["via"] ?? nil).flatMap { ["patch", "full"].contains($0) ? $0 : nil } ?? "unknown"
                bump("offline_server_report_updates_total", ["app": app, "version": version, "via": via], 1)
                if via == "patch", let fullSize = number(row, "fullSize"), bytes >= 0, fullSize > bytes {
                    bump("offline_server_report_saved_bytes_total", ["app": app], fullSize - bytes)
                }
            case "failed":
                let cause = (row["errorCode"] ?? nil).map { OfflineAgentError.Cause(rawValue: $0) == nil ? "other" : $0 } ?? "unknown"
                bump("offline_server_report_failures_total", ["app": app, "cause": cause], 1)
            case "rolled-back", "marked-bad":
                bump("offline_server_report_rollbacks_total", ["app": app], 1)
            case "usage":
                let hits = max(0, number(row, "offlineHits") ?? 0)
                bump("offline_server_report_offline_hits_total", ["app": app], hits)
                usage[app, default: (0, 0)].hits = add(usage[app, default: (0, 0)].hits, hits)
            default:
                break
            }
        }
        for row in fallbacks {
            let app = row["app"]! == "fleet" ? "fleet" : "other", reason = row["reason"]!!
            let count = max(0, number(row, "count") ?? 0)
            bump("offline_server_report_fallbacks_total", ["app": app, "reason": FallbackReason(rawValue: reason) == nil ? "other" : reason], count)
            usage[app, default: (0, 0)].all = add(usage[app, default: (0, 0)].all, count)
        }
        var expected = counts.filter { $0.value > 0 }.mapValues(Double.init)
        for (app, sums) in usage {
            let all = add(sums.hits, sums.all)
            expected["offline_server_report_offline_hit_ratio{app=\(app)}"] = all > 0 ? Double(sums.hits) / Double(all) : 0
        }
        return expected
    }

    /// The fleet series `/metrics` shows, keyed as `recount` keys them.
    static func shown(_ base: String) async throws -> [String: Double] {
        var shown: [String: Double] = [:]
        for sample in try await C.metrics(base).samples where sample.name.hasPrefix("offline_server_report_") {
            let labels = sample.labels.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ",")
            shown[sample.name + "{" + labels + "}"] = sample.value
        }
        return shown
    }

    static func expectRecount(_ base: String, _ store: String, _ when: String) async throws {
        let shown = try await shown(base), expected = try await recount(store)
        #expect(!expected.isEmpty)
        for key in Set(shown.keys).union(expected.keys).sorted() where shown[key] != expected[key] {
            Issue.record("\(when): \(key) shows \(shown[key].map { "\($0)" } ?? "nothing"), the events count \(expected[key].map { "\($0)" } ?? "nothing")")
        }
    }

    /// What a server of the previous schema left: events it let in with 2^63 − 1 (an update
    /// via patch, usage, a failure with a code no device sends, a fallback), and no
    /// counter sums; its fallback sums (which `/metrics` reads too) saturated as it kept them.
    static func olderServerHistory(_ store: String) async throws {
        let max = Int64.max
        let insert = """
            INSERT INTO events (id, time, timeMillis, device, app, event, version, via, errorCode, bytes, fullSize, durationMs,
                offlineHits, periodSeconds, receivedMillis) VALUES
                ('older-1xxxxxxx', '2026-11-22T21:30:00Z', 0, 'old', 'fleet', 'updated', '2.0.0', 'patch', NULL, 0, \(max), 1, NULL, NULL, 0),
                ('older-2xxxxxxx', '2026-11-22T21:30:00Z', 0, 'old', 'fleet', 'updated', '2.1.0', 'patch', NULL, \(max), \(max), 1, NULL, NULL, 0),
                ('older-3xxxxxxx', '2026-11-22T21:30:00Z', 0, 'old', 'fleet', 'usage', '2.0.0', NULL, NULL, \(max), NULL, 1, \(max), 60, 0),
                ('older-4xxxxxxx', '2026-11-22T21:30:00Z', 0, 'old', 'fleet', 'failed', '9.9.9', NULL, 'no-such-cause', -5, NULL, 1, NULL, NULL, 0),
                ('older-5xxxxxxx', '2026-11-22T21:30:00Z', 0, 'old', 'elsewhere', 'usage', NULL, NULL, NULL, 3, NULL, 1, -7, 60, 0);
            INSERT INTO fallbacks (eventSeq, reason, count) SELECT seq, 'missing-file', \(max) FROM events WHERE id = 'older-3xxxxxxx';
            INSERT INTO fallback_totals (app, reason, count) VALUES ('fleet', 'missing-file', \(max))
                ON CONFLICT (app, reason) DO UPDATE SET count = \(max);
            DROP TABLE report_counters;
            """
        if store.hasPrefix("postgres") {
            try await PostgresTestDatabase.psql(store, insert + "DELETE FROM offline_server_migrations WHERE name = 'v6';")
        } else {
            let script = "import sqlite3, sys; db = sqlite3.connect(sys.argv[1]); db.executescript(sys.argv[2]); "
                + "db.execute(\"DELETE FROM grdb_migrations WHERE identifier = 'v6'\"); db.commit()"
            let result = try await CLI.run(["-c", script, store, insert], executable: "/usr/bin/python3")
            try #require(result.status == 0, "\(result.stderr)")
        }
    }

    /// `offline_server_report_rollbacks_total` counts the rollbacks `/stats` counts against
    /// the versions rolled back from (and `rollback-rate` judges): `marked-bad` included.
    static func expectRollbacksAgree(_ base: String) async throws {
        let shown = try await shown(base)
        for app in ["fleet", "other"] {
            let stats = try await C.stats(base, app: app)
            let listed = (stats["versions"] as! [[String: Any]]).reduce(0) { $0 + ($1["rolledBack"] as! Int) }
            let rolledBack = listed + ((stats["otherVersions"] as? [String: Any])?["rolledBack"] as? Int ?? 0)
            #expect(rolledBack > 0)
            #expect(shown["offline_server_report_rollbacks_total{app=\(app)}"] == Double(rolledBack), "\(app): /stats \(rolledBack)")
        }
    }

    func check(store: String) async throws {
        try await C.withServer(database: store) { server in
            _ = try await ReportRollupTests.postAndCheck(server.baseURL, seed: 1)
            try await Self.expectRecount(server.baseURL, store, "after ingestion")
            try await Self.expectRollbacksAgree(server.baseURL)
        }
        try await Self.olderServerHistory(store)
        try await C.withServer(database: store) { server in
            try await Self.expectRecount(server.baseURL, store, "a database of the previous schema, at start")
            let shown = try await Self.shown(server.baseURL)
            #expect(shown["offline_server_report_saved_bytes_total{app=fleet}"] == Double(Int64.max))
            #expect(shown["offline_server_report_offline_hits_total{app=fleet}"] == Double(Int64.max))
            // Live batches on top of saturated sums, with resent events.
            for batch in ReportRollupTests.batches(seed: 2) {
                #expect(try await C.post(server.baseURL, try C.body(batch)).status == 200)
            }
            try await Self.expectRecount(server.baseURL, store, "after more ingestion")
        }
        try await C.withServer(database: store) { server in
            try await Self.expectRecount(server.baseURL, store, "after a restart")
        }
    }

    @Test("SQLite: /metrics equals a recount after ingestion, a migration from the previous schema and restarts")
    func sqlite() async throws {
        let dir = try PublishFixtures.temporaryDirectory("counters-sqlite")
        defer { PublishFixtures.cleanUp(dir) }
        try await check(store: dir + "/reports.sqlite")
    }

    @Test("PostgreSQL: the same", .enabled(if: PostgresTestDatabase.isAvailable, "\(PostgresTestDatabase.server.skipReason ?? "")"))
    func postgres() async throws {
        let database = try await PostgresTestDatabase("counters")
        defer { database.drop() }
        try await check(store: database.url)
    }
}
