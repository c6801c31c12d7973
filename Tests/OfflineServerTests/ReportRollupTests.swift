import Foundation
import OfflineAgent
import TestSupport
import Testing

/// `/stats` reads running sums kept at ingestion (`ReportRollup`), not the events. These
/// tests hold the sums to a recount from the events themselves, made here with the
/// arithmetic docs/PROTOCOL.md gives, over batches a fleet sends in the wild: clocks out
/// of order, resent events, events without a version or an error code, several apps.
/// They also fill the sums of a database written before they existed.
@Suite("Fleet reports: running sums equal a recount", .serialized)
struct ReportRollupTests {
    typealias C = FleetReportClient

    /// Batches of events for apps `fleet` and `other`: 30 devices, updates to versions in
    /// any order and with clocks far apart, failures with and without codes, rollbacks,
    /// usage with fallbacks, events without a version, and resent events.
    static func batches(seed: UInt64) -> [[[String: Any]]] {
        var random = SplitMix64(seed: seed)  // the same events on every run
        let versions = ["1.0.0", "2.0.0", "2.1.0", "3.0.0-beta"]
        let codes: [String?] = ["network", "hash-mismatch", nil, "disk-full", "patch-invalid", "timeout", "io"]
        var sent: [[String: Any]] = []
        var batches: [[[String: Any]]] = []
        for _ in 0..<12 {
            var batch: [[String: Any]] = []
            for _ in 0..<Int.random(in: 5...40, using: &random) {
                let app = Int.random(in: 0..<4, using: &random) == 0 ? "other" : "fleet"
                let device = "roll-\(Int.random(in: 0..<30, using: &random))"
                let version: String? = Int.random(in: 0..<12, using: &random) == 0 ? nil : versions.randomElement(using: &random)!
                // Seconds apart, hours apart, one far in the future: "latest" is by arrival, whatever the time.
                let second = Int.random(in: 0..<4, using: &random) == 0 ? Int.random(in: 0..<5, using: &random) : Int.random(in: 0..<86_400, using: &random)
                let time = Int.random(in: 0..<50, using: &random) == 0 ? "2099-01-01T00:00:00Z" : Self.time(second)
                var event: [String: Any]
                switch Int.random(in: 0..<11, using: &random) {
                case 0..<5:
                    let patch = Bool.random(using: &random)
                    event = C.event("updated", app: app, device: device, version: version, [
                        "via": patch ? "patch" : "full", "bytes": Int.random(in: 100...5000, using: &random), "fullSize": 4000,
                    ])
                case 5, 6:
                    var fields: [String: Any] = [:]
                    if let code = codes.randomElement(using: &random)! { fields["errorCode"] = code }
                    event = C.event("failed", app: app, device: device, version: version, fields)
                case 7:
                    event = C.event("rolled-back", app: app, device: device, version: version, ["previousVersion": versions.randomElement(using: &random)!])
                case 9:
                    // A mark-bad rolls back too: to the version before, or (no version) to none.
                    let from = versions.randomElement(using: &random)!
                    event = C.event("marked-bad", app: app, device: device, version: Bool.random(using: &random) ? nil : version,
                                    ["previousVersion": from, "message": "crashes"])
                case 8:
                    event = C.event("usage", app: app, device: device, version: version, [
                        "offlineHits": Int.random(in: 0...50, using: &random),
                        "fallbacks": ["missing-file": Int.random(in: 1...3, using: &random), "offline": 1],
                    ])
                default:
                    event = C.event("marked-good", app: app, device: device, version: version)
                }
                event["time"] = time
                batch.append(event)
            }
            // A retry: events already stored, sent again.
            if !sent.isEmpty { batch += (0..<3).map { _ in sent.randomElement(using: &random)! } }
            sent += batch
            batches.append(batch)
        }
        return batches
    }

    static func time(_ second: Int) -> String {
        String(format: "2026-11-20T%02d:%02d:%02dZ", second / 3600, second / 60 % 60, second % 60)
    }

    /// `/stats` of `app` recounted from `events` in the order the server stored them.
    static func recount(_ events: [[String: Any]], app: String) -> [String: Any] {
        var seen = Set<String>()
        let stored = events.filter { seen.insert($0["id"] as! String).inserted && $0["app"] as! String == app }
        // Where each device is: its latest move (an update, a rollback or a mark-bad, which
        // leaves it on its version or on none) by arrival; its clock plays no part.
        let rollbacks: Set<String> = ["rolled-back", "marked-bad"]
        var latest: [String: String] = [:]
        for event in stored {
            let kind = event["event"] as! String
            let version: String
            if kind == "updated", let named = event["version"] as? String {
                version = named
            } else if rollbacks.contains(kind) {
                version = event["version"] as? String ?? ""
            } else {
                continue
            }
            latest[event["device"] as! String] = version
        }
        // A rollback counts against the version rolled back from.
        let rolledBackFrom = stored.filter { rollbacks.contains($0["event"] as! String) }.compactMap { $0["previousVersion"] as? String }
        var versions: [String: [String: Any]] = [:]
        for version in Set(stored.compactMap { $0["version"] as? String } + rolledBackFrom) {
            let of = stored.filter { $0["version"] as? String == version }
            let count = { (kind: String) in of.filter { $0["event"] as! String == kind }.count }
            let failures = Dictionary(grouping: of.filter { $0["event"] as! String == "failed" }) { $0["errorCode"] as? String ?? "" }
            let top = failures.map { (code: $0.key, count: $0.value.count) }
                .sorted { $0.count != $1.count ? $0.count > $1.count : $0.code.utf8.lexicographicallyPrecedes($1.code.utf8) }
                .prefix(5).map { "\($0.code.isEmpty ? "null" : $0.code):\($0.count)" }
            let saved = of.reduce(0) { sum, event in
                guard event["event"] as! String == "updated", event["via"] as! String == "patch" else { return sum }
                return sum + max(0, (event["fullSize"] as! Int) - (event["bytes"] as! Int))
            }
            versions[version] = [
                "devices": latest.values.filter { $0 == version }.count, "updated": count("updated"),
                "failed": count("failed"), "rolledBack": rolledBackFrom.filter { $0 == version }.count, "topFailures": top,
                "bytesDownloaded": of.reduce(0) { $0 + ($1["bytes"] as! Int) }, "bytesSaved": saved,
            ]
        }
        var fallbacks: [String: Int] = [:]
        for event in stored {
            // serve's own reasons by name, any other as `other`.
            for (reason, count) in event["fallbacks"] as? [String: Int] ?? [:] {
                fallbacks[FallbackReason(rawValue: reason) == nil ? "other" : reason, default: 0] += count
            }
        }
        return [
            "events": stored.count, "devices": Set(stored.map { $0["device"] as! String }).count,
            "offlineHits": stored.reduce(0) { $0 + ($1["event"] as! String == "usage" ? $1["offlineHits"] as! Int : 0) },
            "bytesDownloaded": stored.reduce(0) { $0 + ($1["bytes"] as! Int) }, "fallbacks": fallbacks, "versions": versions,
        ]
    }

    /// The figures `recount` gives, read from a `/stats` answer.
    static func figures(_ stats: [String: Any]) -> [String: Any] {
        var versions: [String: [String: Any]] = [:]
        for entry in stats["versions"] as! [[String: Any]] {
            let top = (entry["topFailures"] as! [[String: Any]]).map { "\($0["errorCode"] as? String ?? "null"):\($0["count"] as! Int)" }
            versions[entry["version"] as! String] = [
                "devices": entry["devices"] as! Int, "updated": entry["updated"] as! Int, "failed": entry["failed"] as! Int,
                "rolledBack": entry["rolledBack"] as! Int, "topFailures": top, "bytesDownloaded": entry["bytesDownloaded"] as! Int,
                "bytesSaved": entry["bytesSaved"] as! Int,
            ]
        }
        return [
            "events": stats["events"] as! Int, "devices": stats["devices"] as! Int, "offlineHits": stats["offlineHits"] as! Int,
            "bytesDownloaded": stats["bytesDownloaded"] as! Int, "fallbacks": stats["fallbacks"] as! [String: Int],
            "versions": versions,
        ]
    }

    static func same(_ a: [String: Any], _ b: [String: Any]) -> Bool {
        (try? JSONSerialization.data(withJSONObject: a, options: .sortedKeys)) == (try? JSONSerialization.data(withJSONObject: b, options: .sortedKeys))
    }

    /// Posts every batch in order and checks `/stats` of both apps against the recount.
    static func postAndCheck(_ base: String, seed: UInt64) async throws -> [[String: Any]] {
        let batches = batches(seed: seed)
        for batch in batches {
            #expect(try await C.post(base, try C.body(batch)).status == 200)
        }
        let all = batches.flatMap { $0 }
        for app in ["fleet", "other"] {
            let shown = figures(try await C.stats(base, app: app)), expected = recount(all, app: app)
            #expect(same(shown, expected), "\(app): /stats \(shown)\nrecount \(expected)")
        }
        return all
    }

    /// A database of `store` with its running sums dropped, as a server before them left it.
    static func forgetSums(_ store: String) async throws {
        let tables = ["version_totals", "failure_causes", "fallback_totals", "devices", "version_moves"]
        if store.hasPrefix("postgres") {
            try await PostgresTestDatabase.psql(store, tables.map { "DROP TABLE \($0);" }.joined() + "DELETE FROM offline_server_migrations WHERE name IN ('v3', 'v4', 'v7', 'v8');")
        } else {
            let script = "import sqlite3, sys; db = sqlite3.connect(sys.argv[1]); "
                + tables.map { "db.execute('DROP TABLE \($0)'); " }.joined()
                + "db.execute(\"DELETE FROM grdb_migrations WHERE identifier IN ('v3', 'v4', 'v7', 'v8')\"); db.commit()"
            let result = try await CLI.run(["-c", script, store], executable: "/usr/bin/python3")
            try #require(result.status == 0, "\(result.stderr)")
        }
    }

    /// The dashboard's table, per version: devices now, updates, failures, rollbacks.
    static func dashboardRows(_ base: String) async throws -> [String: [String: Int]] {
        let page = try await CLI.run(["-sS", "--max-time", "60", base + "/dashboard?app=fleet"], executable: "/usr/bin/curl").stdout
        let pattern = try Regex(#"<tr class="[^"]*" data-version="([^"]*)" data-devices="(\d+)" data-updated="(\d+)" data-failed="(\d+)" data-rolled-back="(\d+)""#)
        var rows: [String: [String: Int]] = [:]
        for match in page.matches(of: pattern) {
            let number = { (index: Int) in Int(match.output[index].substring ?? "") ?? -1 }
            rows[String(match.output[1].substring ?? "")] = [
                "devices": number(2), "updated": number(3), "failed": number(4), "rolledBack": number(5),
            ]
        }
        return rows
    }

    /// The sums equal the recount; after they are dropped, the next start fills them from
    /// the events, and `/stats` and the dashboard's chart come back the same.
    func check(store: String, seed: UInt64) async throws {
        var before = ""
        var dashboard: [String] = []
        try await C.withServer(database: store) { server in
            let events = try await Self.postAndCheck(server.baseURL, seed: seed)
            // The dashboard's table shows the recount too: rollbacks (mark-bad included)
            // against the version rolled back from, devices where they are now.
            let recounted = (Self.recount(events, app: "fleet")["versions"] as! [String: [String: Any]]).mapValues { figures in
                ["devices", "updated", "failed", "rolledBack"].reduce(into: [String: Int]()) { $0[$1] = figures[$1] as? Int }
            }
            let shown = try await Self.dashboardRows(server.baseURL)
            #expect(shown == recounted, "dashboard \(shown)\nrecount \(recounted)")
            before = try await C.statsText(server.baseURL)
            dashboard = try await Self.chart(server.baseURL)
            // Each line ends at the devices /stats counts on its version.
            let stats = try await C.stats(server.baseURL)
            let devices = (stats["versions"] as! [[String: Any]]).filter { $0["devices"] as! Int > 0 }
                .map { "\($0["version"] as! String)=\($0["devices"] as! Int)" }
            #expect(dashboard.filter { !$0.hasSuffix("=0") } == devices.sorted())
        }
        try await Self.forgetSums(store)
        try await C.withServer(database: store) { server in
            let stats = try await C.statsText(server.baseURL), chart = try await Self.chart(server.baseURL)
            #expect(stats == before, "filled from the events at start")
            #expect(chart == dashboard)
        }
    }

    /// The dashboard chart's lines as `version=devices now`, one per line of the chart
    /// (where they end: what a database filled at start must draw as the live one did).
    static func chart(_ base: String) async throws -> [String] {
        let page = try await CLI.run(["-sS", "--max-time", "60", base + "/dashboard?app=fleet"], executable: "/usr/bin/curl").stdout
        let pattern = try Regex(#"data-version="([^"]*)" data-last="(\d+)""#)
        let lines = page.matches(of: pattern).map { "\($0.output[1].substring ?? "")=\($0.output[2].substring ?? "")" }
        #expect(!lines.isEmpty, "no chart in the dashboard")
        return lines.sorted()
    }

    @Test("SQLite: /stats equals a recount of the events, and a database from before the sums is filled at start",
          arguments: [UInt64(1), 2, 3])
    func sqlite(seed: UInt64) async throws {
        let dir = try PublishFixtures.temporaryDirectory("rollup-sqlite")
        defer { PublishFixtures.cleanUp(dir) }
        try await check(store: dir + "/reports.sqlite", seed: seed)
    }

    @Test("PostgreSQL: the same", .enabled(if: PostgresTestDatabase.isAvailable, "\(PostgresTestDatabase.server.skipReason ?? "")"),
          arguments: [UInt64(1), 2])
    func postgres(seed: UInt64) async throws {
        let database = try await PostgresTestDatabase("rollup")
        defer { database.drop() }
        try await check(store: database.url, seed: seed)
    }

    /// A device whose clock was once in 2099 updated to 1.1.0 then, and, its clock set
    /// right, rolled back and updated to 1.0.0; one whose clock was reset into the past
    /// moved the other way. Each device is where its last move (by arrival) put it, in
    /// `/stats` and on the dashboard, and a start that recounts the positions (`v8`) puts
    /// it there too.
    func clocks(store: String) async throws {
        let moves: [(device: String, event: String, version: String, previous: String?, time: String)] = [
            ("future", "updated", "1.1.0", "1.0.0", "2099-01-01T00:00:00Z"),
            ("future", "rolled-back", "1.0.0", "1.1.0", "2026-11-20T10:00:00Z"),
            ("future", "updated", "1.0.0", nil, "2026-11-20T10:01:00Z"),
            ("past", "updated", "1.0.0", nil, "2026-11-20T10:00:00Z"),
            ("past", "updated", "1.2.0", "1.0.0", "1970-01-02T00:00:00Z"),
        ]
        let expect = { (base: String, moment: String) in
            let stats = try await C.stats(base)
            #expect(C.version(stats, "1.0.0")?["devices"] as? Int == 1, "\(moment): future is on 1.0.0 \(stats)")
            #expect(C.version(stats, "1.1.0")?["devices"] as? Int == 0, "\(moment): none is on 1.1.0 \(stats)")
            #expect(C.version(stats, "1.2.0")?["devices"] as? Int == 1, "\(moment): past is on 1.2.0 \(stats)")
            let rows = try await Self.dashboardRows(base)
            #expect(rows["1.0.0"]?["devices"] == 1 && rows["1.1.0"]?["devices"] == 0 && rows["1.2.0"]?["devices"] == 1,
                    "\(moment): dashboard \(rows)")
        }
        try await C.withServer(database: store) { server in
            // One batch per move, as a device's queue sends them after each sync.
            for move in moves {
                var fields: [String: Any] = [:]
                if let previous = move.previous { fields["previousVersion"] = previous }
                var event = C.event(move.event, app: "fleet", device: move.device, version: move.version, fields)
                event["time"] = move.time
                #expect(try await C.post(server.baseURL, try C.body([event])).status == 200)
            }
            try await expect(server.baseURL, "live")
        }
        // A database whose positions an older server placed by the devices' clocks: `v8` recounts them.
        let wrong = "UPDATE devices SET version = CASE WHEN device = 'future' THEN '1.1.0' ELSE '1.0.0' END WHERE app = 'fleet';"
        let record = store.hasPrefix("postgres") ? "DELETE FROM offline_server_migrations WHERE name = 'v8';" : "DELETE FROM grdb_migrations WHERE identifier = 'v8';"
        try await ReportEnrolmentTests.sql(store, wrong + record)
        try await C.withServer(database: store) { server in try await expect(server.baseURL, "after v8") }
    }

    @Test("SQLite: where a device is follows arrival, not a clock once in 2099 or reset to 1970")
    func sqliteClocks() async throws {
        let dir = try PublishFixtures.temporaryDirectory("rollup-clocks")
        defer { PublishFixtures.cleanUp(dir) }
        try await clocks(store: dir + "/reports.sqlite")
    }

    @Test("PostgreSQL: the same", .enabled(if: PostgresTestDatabase.isAvailable, "\(PostgresTestDatabase.server.skipReason ?? "")"))
    func postgresClocks() async throws {
        let database = try await PostgresTestDatabase("rollup_clocks")
        defer { database.drop() }
        try await clocks(store: database.url)
    }
}
