import Crypto
import Foundation
import OfflineAgent
import TestSupport
import Testing

/// `POST /report` as an attacker sends it, against `offline-server` as a process (so a
/// trap is a dead server, not a dead test run): numbers at and past every bound, and a
/// database an older server let such numbers into. No input, stored or new, may stop
/// the server or wedge an app; each is refused with a `400` naming its field, or its
/// sums saturate at 2^63 − 1.
@Suite("Fleet reports: hostile input")
struct ReportHostileInputTests {
    typealias C = FleetReportClient

    static let huge = Int64.max

    /// A fresh store of each kind the machine can run: SQLite always, PostgreSQL when available.
    static func stores(_ label: String, in dir: String) async throws -> [(name: String, url: String, drop: () -> Void)] {
        var stores: [(name: String, url: String, drop: () -> Void)] = [("SQLite", dir + "/reports.sqlite", {})]
        if PostgresTestDatabase.isAvailable {
            let database = try await PostgresTestDatabase(label)
            stores.append(("PostgreSQL", database.url, { database.drop() }))
        }
        return stores
    }

    /// `body` for each store, on a publish directory holding app `fleet`.
    static func onEachStore(_ label: String, _ body: (_ dir: String, _ store: (name: String, url: String)) async throws -> Void) async throws {
        let dir = try PublishFixtures.temporaryDirectory("hostile-\(label)")
        defer { PublishFixtures.cleanUp(dir) }
        try C.publishFleet(dir)
        for store in try await stores(label, in: dir) {
            defer { store.drop() }
            try await body(dir, (store.name, store.url))
        }
    }

    /// `body` for each store with an `offline-server` process on it, stopped after.
    static func onEachServer(_ label: String, _ body: (_ store: (name: String, url: String), _ server: OfflineServerProcess) async throws -> Void) async throws {
        try await onEachStore(label) { dir, store in
            let server = try await OfflineServerProcess(arguments: ["--dir", dir, "--open-collector", "--reports-db", store.url])
            defer { server.stopInBackground() }
            try await body(store, server)
        }
    }

    /// The server still answers what it serves: `/stats`, a manifest and `/metrics`.
    static func expectServing(_ server: OfflineServerProcess, _ store: String) async throws {
        #expect(server.process.isRunning, "\(store): the server died")
        #expect(try await PublishHTTP.fetch(server.baseURL + "/stats?app=fleet").status == 200, "\(store)")
        #expect(try await PublishHTTP.fetch(server.baseURL + "/fleet/manifest").status == 200, "\(store)")
        #expect(try await PublishHTTP.fetch(server.baseURL + "/metrics").status == 200, "\(store)")
    }

    @Test("numbers past the bound or below 0 are refused with 400 naming the field; the server keeps serving")
    func numbersAtTheDoor() async throws {
        try await Self.onEachServer("numbers") { store, server in
            // The issue's reproduction: two events of 2^63 − 1 bytes in one batch, then in two.
            let two = [C.event("updated", ["bytes": Self.huge]), C.event("updated", ["bytes": Self.huge])]
            var answer = try await C.post(server.baseURL, try C.body(two))
            #expect(answer.status == 400 && answer.body.contains("'bytes'"), "\(store.name): \(answer.status) \(answer.body)")
            for event in two {
                answer = try await C.post(server.baseURL, try C.body([event]))
                #expect(answer.status == 400 && answer.body.contains("'bytes'"), "\(store.name): \(answer.body)")
            }
            let cases: [(field: String, event: [String: Any])] = [
                ("bytes", C.event("updated", ["bytes": -1])),
                ("bytes", C.event("updated", ["bytes": (1 << 40) + 1])),
                ("fullSize", C.event("updated", ["via": "patch", "bytes": 1, "fullSize": Self.huge])),
                ("durationMs", C.event("failed", ["durationMs": Self.huge])),
                ("offlineHits", C.event("usage", ["offlineHits": Self.huge])),
                ("periodSeconds", C.event("usage", ["periodSeconds": Self.huge])),
                ("fallbacks", C.event("usage", ["fallbacks": ["missing-file": Self.huge]])),
                ("bytes", C.event("updated", ["bytes": 18_446_744_073_709_551_615 as UInt64])),
            ]
            for (field, event) in cases {
                answer = try await C.post(server.baseURL, try C.body([C.event("marked-good"), event]))
                #expect(answer.status == 400 && answer.body.contains("event 1: '\(field)'"), "\(store.name) \(field): \(answer.status) \(answer.body)")
            }
            // The bound itself is a number like any other.
            let most = C.event("updated", ["bytes": 1 << 40, "via": "full"])
            #expect(try await C.post(server.baseURL, try C.body([most])).receipt?.accepted == 1, "\(store.name)")
            #expect(try await C.stats(server.baseURL)["bytesDownloaded"] as? Int == 1 << 40, "\(store.name)")
            try await Self.expectServing(server, store.name)
        }
    }

    /// What an older server left after accepting 2^63 − 1: huge events and fallbacks, on
    /// SQLite a running sum its `+` overflowed into a REAL, and no `/metrics` counter sums
    /// (a start fills them from the events, `ReportCounters`).
    static func poison(_ store: String) async throws {
        let max = Int64.max
        let events = (0..<2).map { i in
            "('poison\(i)xxxx', '2026-11-22T21:30:00Z', 0, 'evil', 'fleet', 'usage', '2.0.0', \(max), \(max), \(max), \(max), 60, 0)"
        }.joined(separator: ", ")
        let insert = """
            INSERT INTO events (id, time, timeMillis, device, app, event, version, bytes, fullSize, durationMs, offlineHits,
                periodSeconds, receivedMillis) VALUES \(events);
            INSERT INTO fallbacks (eventSeq, reason, count) SELECT seq, 'missing-file', \(max) FROM events WHERE device = 'evil';
            DROP TABLE report_counters;
            """
        if store.hasPrefix("postgres") {
            try await PostgresTestDatabase.psql(store, insert + """
                UPDATE version_totals SET bytes = \(max), offlineHits = \(max), events = \(max) WHERE app = 'fleet';
                UPDATE fallback_totals SET count = \(max) WHERE app = 'fleet';
                DELETE FROM offline_server_migrations WHERE name = 'v6';
                """)
        } else {
            let script = """
                import sqlite3, sys
                db = sqlite3.connect(sys.argv[1])
                db.executescript(sys.argv[2])
                db.execute("UPDATE version_totals SET bytes = 1.8446744073709552e19, offlineHits = 1.8e19, events = 1.8e19 WHERE app = 'fleet'")
                db.execute("UPDATE fallback_totals SET count = 1.8e19 WHERE app = 'fleet'")
                db.execute("DELETE FROM grdb_migrations WHERE identifier = 'v6'")
                db.commit()
                """
            let result = try await CLI.run(["-c", script, store, insert], executable: "/usr/bin/python3")
            try #require(result.status == 0, "\(result.stderr)")
        }
    }

    @Test("a database an older server poisoned with 2^63 − 1 opens, serves, saturates and keeps taking real reports")
    func poisonedDatabase() async throws {
        try await Self.onEachStore("poison") { dir, store in
            let first = try await OfflineServerProcess(arguments: ["--dir", dir, "--open-collector", "--reports-db", store.url])
            let usage = C.event("usage", device: "d1", ["offlineHits": 5, "fallbacks": ["missing-file": 2]])
            #expect(try await C.post(first.baseURL, try C.body([usage])).receipt?.accepted == 1, "\(store.name)")
            await first.stop()
            try await Self.poison(store.url)

            let server = try await OfflineServerProcess(arguments: ["--dir", dir, "--open-collector", "--reports-db", store.url])
            defer { server.stopInBackground() }
            try await Self.expectServing(server, store.name)
            // A real report of the poisoned app and version is stored (PostgreSQL answered 503 for ever).
            let real = C.event("usage", device: "d2", ["offlineHits": 1, "fallbacks": ["missing-file": 1], "bytes": 100])
            let answer = try await C.post(server.baseURL, try C.body([real]))
            #expect(answer.receipt?.accepted == 1, "\(store.name): \(answer.status) \(answer.body)")
            let stats = try await C.stats(server.baseURL)
            #expect(stats["bytesDownloaded"] as? Int64 == Int64.max, "\(store.name): \(stats)")
            #expect(stats["offlineHits"] as? Int64 == Int64.max, "\(store.name)")
            #expect((stats["fallbacks"] as? [String: Int64])?["missing-file"] == Int64.max, "\(store.name)")
            #expect(try await PublishHTTP.fetch(server.baseURL + "/dashboard?app=fleet").status == 200, "\(store.name)")
            let metrics = try await C.fleetMetricsText(server.baseURL)
            #expect(metrics.contains(#"offline_server_report_downloaded_bytes_total{app="fleet"} 9223372036854775807"#), "\(store.name): \(metrics)")
            #expect(!metrics.contains("} -"), "\(store.name): a counter wrapped round: \(metrics)")
            try await Self.expectServing(server, store.name)
        }
    }

    /// An event per string field a device chooses, that field holding `bad`.
    static func stringFields(_ bad: String) -> [(field: String, event: [String: Any])] {
        [
            ("device", C.event("marked-good", device: bad)),
            ("version", C.event("marked-good", version: bad)),
            ("previousVersion", C.event("rolled-back", ["previousVersion": bad])),
            ("errorCode", C.event("failed", ["errorCode": bad])),
            ("message", C.event("marked-bad", ["message": bad])),
            ("fallbacks", C.event("usage", ["fallbacks": [bad: 1]])),
        ]
    }

    @Test("a bidirectional control in any string but message is refused with 400 naming the field: U+202E 0.1.1 would read 1.1.0 on the dashboard")
    func bidiControls() async throws {
        try await Self.onEachServer("bidi") { store, server in
            for bad in ["\u{202E}0.1.1", "2.0.0\u{2066}", "\u{200F}x", "a\u{061C}b"] {
                for (field, event) in Self.stringFields(bad).filter({ $0.field != "message" }) {
                    let answer = try await C.post(server.baseURL, try C.body([C.event("marked-good"), event]))
                    #expect(answer.status == 400 && answer.body.contains("event 1:") && answer.body.contains(field)
                        && answer.body.contains("bidirectional"), "\(store.name) \(field) \(bad.debugDescription): \(answer.status) \(answer.body)")
                }
            }
            #expect(try await C.stats(server.baseURL)["events"] as? Int == 0, "\(store.name): nothing of a refused batch is stored")
            // A message, shown nowhere, keeps what a device's error text holds.
            let message = try await C.post(server.baseURL, try C.body([C.event("marked-bad", ["message": "\u{200F}\u{05E9}\u{05DC}\u{05D5}\u{05DD}"])]))
            #expect(message.receipt?.accepted == 1, "\(store.name): \(message.body)")
        }
    }

    @Test("a control character in any string is refused with 400 naming the field; a device's queue drops it and goes on")
    func controlCharacters() async throws {
        try await Self.onEachServer("control") { store, server in
            for bad in ["a\u{0}b", "\u{0}", "line\nforged", "tab\there", "\u{1b}[31mred", "del\u{7f}", "c1\u{85}"] {
                for (field, event) in Self.stringFields(bad) {
                    let answer = try await C.post(server.baseURL, try C.body([C.event("marked-good"), event]))
                    #expect(answer.status == 400 && answer.body.contains("event 1:") && answer.body.contains(field)
                        && answer.body.contains("control character"), "\(store.name) \(field) \(bad.debugDescription): \(answer.status) \(answer.body)")
                }
            }
            #expect(try await C.stats(server.baseURL)["events"] as? Int == 0, "\(store.name): nothing of a refused batch is stored")

            // A device's queue holding such an event (an older agent wrote it): the batch is
            // refused, dropped and counted, and the next event is delivered.
            let root = TemporaryDirectory("hostile-queue")
            let url = try #require(URL(string: server.baseURL + "/report"))
            let queue = ReportQueue(root: root.path, url: url, maxEvents: 100)
            var raw = OfflineAgent.ReportEvent(time: Date(), device: "q1", app: "fleet", event: .markedBad, previousVersion: "2.0.0")
            raw.message = "reason=a\u{0}b"
            try queue.append([raw])
            var settings = ReportSettings()
            settings.deadline = .seconds(120)  // a bound on a hung server, not a speed
            let sender = ReportSender(
                root: root.path, settings: settings, network: NetworkSettings(), clock: { Date() }, pool: BlockingPool())
            let first = await sender.flush()
            #expect(first.rejected == 1 && first.failed.isEmpty && queue.pending() == 0, "\(store.name): \(first)")
            // The agent's own event from the same reason is cleaned, and stored.
            let clean = OfflineAgent.ReportEvent(
                time: Date(), device: "q1", app: "fleet", event: .markedBad, previousVersion: "2.0.0", message: "reason=a\u{0}b\r\n\u{2028}")
            #expect(clean.message == "reason=a b   ")
            try queue.append([clean])
            let next = await sender.flush()
            #expect(next.delivered == 1 && next.rejected == 0, "\(store.name): \(next)")
            #expect(try await C.stats(server.baseURL)["events"] as? Int == 1, "\(store.name)")
        }
    }

    @Test("the dashboard escapes per Unicode scalar (a quote joined to U+200D stays in its attribute); its CSP allows no inline style but its own")
    func dashboardEscapes() async throws {
        let dir = try PublishFixtures.temporaryDirectory("hostile-dashboard")
        defer { PublishFixtures.cleanUp(dir) }
        try C.publishFleet(dir)
        let server = try await OfflineServerProcess(arguments: ["--dir", dir, "--open-collector", "--reports-db", dir + "/reports.sqlite"])
        defer { server.stopInBackground() }
        // Each of these is one grapheme cluster that starts with a markup character.
        let names = ["x\"\u{200D} data-evil=\"1", "y\"\u{0301} style=\"display:none", "<\u{20DD}b>bold", "z'\u{200D} onclick='a", "&\u{200D}amp;"]
        let events = names.enumerated().flatMap { index, name in
            [C.event("updated", device: "esc\(index)", version: name, ["via": "full"]),
             C.event("failed", device: "esc\(index)", version: "2.0.0", ["errorCode": name])]
        }
        #expect(try await C.post(server.baseURL, try C.body(events)).receipt?.accepted == events.count)
        let page = try await PublishHTTP.fetch(server.baseURL + "/dashboard?app=fleet")
        #expect(page.status == 200)
        let html = String(decoding: page.body, as: UTF8.self)
        for name in names {
            #expect(!html.contains(name), "written raw: \(name.debugDescription)")
        }
        // Per scalar, as a browser's tokenizer reads it: no quote, angle bracket or ampersand
        // of a name is left unescaped, so every attribute ends where the server ended it.
        #expect(!html.contains("data-evil=\"1") && !html.contains("style=\"display") && !html.contains("<\u{20DD}b>"))
        #expect(!html.contains("onclick='"))
        #expect(html.contains("x&quot;\u{200D} data-evil=&quot;1"))

        let policy = try #require(page.header("Content-Security-Policy"))
        #expect(!policy.contains("unsafe-inline") && policy.hasPrefix("default-src 'none'"), "\(policy)")
        let style = try #require(html.range(of: "<style>").flatMap { start in
            html.range(of: "</style>", range: start.upperBound..<html.endIndex).map { String(html[start.upperBound..<$0.lowerBound]) }
        })
        let hash = "'sha256-" + Data(SHA256.hash(data: Data(style.utf8))).base64EncodedString() + "'"
        #expect(policy.contains("style-src \(hash);"), "the policy allows the page's own style element: \(policy)")
        #expect(!html.contains(" style=\""), "no style attribute: the policy would refuse it")
        #expect(html.components(separatedBy: "<style").count == 2, "one style element")
    }

    /// One random event and whether the wire format admits it: a valid event with, now
    /// and then, a number at or past a bound, a control character in a string, or the id
    /// of an event sent before.
    static func randomEvent(_ random: inout SplitMix64, sent: [String]) -> (event: [String: Any], valid: Bool) {
        let kinds = ["updated", "failed", "rolled-back", "marked-bad", "marked-good", "usage", "deferred"]
        let kind = kinds.randomElement(using: &random)!
        var event = C.event(kind, device: "fuzz-\(Int.random(in: 0..<12, using: &random))",
                            version: ["1.0.0", "2.0.0", "2.1.0", nil].randomElement(using: &random)!)
        var valid = true
        if kind == "rolled-back" || kind == "marked-bad" { event["previousVersion"] = "2.0.0" }
        let numbers: [(value: Int64, valid: Bool)] = [
            (0, true), (7, true), (1 << 40, true), ((1 << 40) + 1, false), (Int64.max, false), (-1, false), (Int64.min, false),
        ]
        switch Int.random(in: 0..<6, using: &random) {
        case 0:
            let number = numbers.randomElement(using: &random)!
            let field = kind == "usage" ? ["bytes", "durationMs", "offlineHits", "periodSeconds"].randomElement(using: &random)!
                : ["bytes", "durationMs", "fullSize"].randomElement(using: &random)!
            event[field] = number.value
            valid = number.valid && !(field == "periodSeconds" && number.value == 0)
        case 1:
            let bad = ["\u{0}", "\n", "\u{1f}", "\u{7f}", "\u{9f}"].randomElement(using: &random)!
            let field = ["device", "message", "errorCode", "version"].randomElement(using: &random)!
            event[field] = "x" + bad + "y"
            valid = false
        case 2 where !sent.isEmpty:
            event["id"] = sent.randomElement(using: &random)!
        default:
            break
        }
        return (event, valid)
    }

    @Test("fuzz: random batches of huge, negative and control-character fields and resent ids; never a trap, each accepted event counted once, each refused batch a 400",
          arguments: [UInt64(38), 3838])
    func fuzz(seed: UInt64) async throws {
        try await Self.onEachServer("fuzz") { store, server in
            var random = SplitMix64(seed: seed)
            var stored = Set<String>(), sent: [String] = []
            for round in 0..<40 {
                var batch: [[String: Any]] = [], valid = true
                for _ in 0..<Int.random(in: 1...12, using: &random) {
                    let (event, ok) = Self.randomEvent(&random, sent: sent)
                    batch.append(event)
                    valid = valid && ok
                }
                let answer = try await C.post(server.baseURL, try C.body(batch))
                if valid {
                    let ids = batch.map { $0["id"] as! String }
                    var fresh = Set<String>()
                    for id in ids where !stored.contains(id) { fresh.insert(id) }
                    #expect(answer.receipt?.accepted == fresh.count && answer.receipt?.duplicates == ids.count - fresh.count,
                            "\(store.name) round \(round): \(answer.status) \(answer.body)")
                    stored.formUnion(fresh)
                    sent += ids
                } else {
                    #expect(answer.status == 400, "\(store.name) round \(round): \(answer.status) \(answer.body)")
                }
            }
            // Every accepted event counted once, whatever was refused or resent around it.
            #expect(try await C.stats(server.baseURL)["events"] as? Int == stored.count, "\(store.name)")
            try await Self.expectServing(server, store.name)
        }
    }

    @Test("200 made-up versions: /stats and the dashboard list 20 and the publish directory's latest, and sum the rest")
    func boundedOutput() async throws {
        let dir = try PublishFixtures.temporaryDirectory("hostile-bounded")
        defer { PublishFixtures.cleanUp(dir) }
        try C.publishFleet(dir)
        let server = try await OfflineServerProcess(arguments: ["--dir", dir, "--open-collector", "--reports-db", dir + "/reports.sqlite"])
        defer { server.stopInBackground() }
        #expect(try await C.post(server.baseURL, try C.body([C.event("updated", device: "real", version: "2.1.0", ["via": "full"])])).status == 200)
        for batch in 0..<4 {
            // 50 versions a batch, all newer than the publish directory's latest (2.1.0).
            let events = (0..<50).map { C.event("updated", device: "fake-\(batch)-\($0)", version: "9.\(batch).\($0)", ["via": "full", "bytes": 1]) }
                + [C.event("usage", device: "fake", version: "9.0.0", ["fallbacks": ["made-up-\(batch)": 2, "missing-file": 1]])]
            #expect(try await C.post(server.baseURL, try C.body(events)).status == 200)
        }
        // Moves between a listed version and one summed with the rest: a device leaves
        // 9.3.49 for 9.0.0, another leaves 9.0.0 for 9.3.48 (the chart reads only the
        // moves into and out of the versions it draws, and must see both).
        let moves = [
            C.event("updated", device: "fake-3-49", version: "9.0.0", ["via": "full", "previousVersion": "9.3.49"]),
            C.event("updated", device: "fake-0-0", version: "9.3.48", ["via": "full", "previousVersion": "9.0.0"]),
            // Failure causes are read for the listed versions only: this one's must show.
            C.event("failed", device: "fake-0-1", version: "9.3.47", ["errorCode": "disk-full"]),
            C.event("failed", device: "fake-0-1", version: "9.0.1", ["errorCode": "network"]),
        ].map { event in event.merging(["time": "2026-11-22T21:31:00Z"]) { $1 } }
        #expect(try await C.post(server.baseURL, try C.body(moves)).status == 200)
        let stats = try await C.stats(server.baseURL)
        let listed = try #require(stats["versions"] as? [[String: Any]]).map { $0["version"] as? String ?? "" }
        #expect(listed.count == 21 && listed.first == "9.3.49" && listed.last == "2.1.0", "\(listed)")
        let causes = try #require(C.version(stats, "9.3.47")?["topFailures"] as? [[String: Any]])
        #expect(causes.map { "\($0["errorCode"] as? String ?? "")×\($0["count"] as? Int ?? 0)" } == ["disk-full×1"])
        let other = try #require(stats["otherVersions"] as? [String: Int])
        #expect(other["versions"] == 180 && other["updated"] == 181 && other["failed"] == 1 && other["devices"] == 180 && other["bytesDownloaded"] == 180, "\(other)")
        #expect(stats["fallbacks"] as? [String: Int] == ["missing-file": 4, "other": 8])
        let page = String(decoding: try await PublishHTTP.fetch(server.baseURL + "/dashboard?app=fleet").body, as: UTF8.self)
        #expect(page.components(separatedBy: "<tr class=").count - 1 == 22, "21 versions and one row of the rest")
        #expect(page.contains("data-other-versions=\"180\""))
        #expect(page.components(separatedBy: "<polyline").count - 1 <= 21)
        // Each line ends at the devices /stats counts on its version now.
        let lines = try Regex(#"<polyline class="line" data-version="([^"]*)" data-last="(\d+)""#)
        let ends = Dictionary(uniqueKeysWithValues: page.matches(of: lines).map { (String($0.output[1].substring ?? ""), Int($0.output[2].substring ?? "") ?? -1) })
        #expect(ends["9.3.49"] == 0 && ends["9.3.48"] == 2, "\(ends)")
        for version in try #require(stats["versions"] as? [[String: Any]]) where ends[version["version"] as? String ?? ""] != nil {
            #expect(ends[version["version"] as? String ?? ""] == version["devices"] as? Int, "\(version)")
        }
        #expect(!page.contains("9.0.0\""), "an old made-up version is summed, not listed")
    }
}
