import Foundation
@testable import OfflineServer
import TestSupport
import Testing

/// Two `offline-server` processes on one PostgreSQL database are one collector: the same
/// batch posted to both at once is stored once; their `/stats` and `/dashboard` agree with
/// each other and with a SQLite server fed the same events (the same arithmetic); the
/// migrations ran once however many servers started.
@Suite(
    "Fleet reports on PostgreSQL: two servers, one collector",
    .enabled(if: PostgresTestDatabase.isAvailable, "\(PostgresTestDatabase.server.skipReason ?? "")"))
struct PostgresCollectorTests {
    typealias C = FleetReportClient

    /// A mix of every kind, hostile bits included (a duplicate id inside the batch, a clock
    /// far off, a version that is not one, a failure without a code).
    static func events() -> [[String: Any]] {
        var events: [[String: Any]] = []
        for i in 0..<40 {
            let device = "pg-device-\(i)"
            events.append(C.event("updated", device: device, version: "1.0.0", ["via": "full", "bytes": 4000]))
            if i % 2 == 0 {
                events.append(C.event("updated", device: device, version: "2.0.0", ["via": "patch", "bytes": 300 + i, "fullSize": 4000, "previousVersion": "1.0.0", "time": "2026-11-23T10:00:00Z"]))
            }
            if i % 5 == 0 {
                events.append(C.event("failed", device: device, version: "2.1.0", i % 10 == 0 ? ["errorCode": "hash-mismatch"] : [:]))
            }
            if i % 7 == 0 { events.append(C.event("rolled-back", device: device, version: "1.0.0", ["previousVersion": "2.0.0"])) }
            events.append(C.event("usage", device: device, version: "2.0.0", ["offlineHits": i, "fallbacks": ["missing-file": 1, "made-up": 2]]))
        }
        events.append(C.event("updated", device: "liar", version: "beta build", ["via": "full", "time": "2099-01-01T00:00:00Z"]))
        // What an array's text would misread (PostgreSQL receives a batch as arrays): quotes,
        // backslashes, braces, commas and the word NULL come back as sent.
        for text in [#"a"b\c{d},e"#, "NULL", #"{"x"}"#, "\\"] {
            events.append(C.event("failed", device: "quoter", version: text, ["errorCode": text, "message": text]))
        }
        events.append(events[0])
        return events
    }

    @Test("the same batch to both servers at once is stored once; /stats agrees across servers and with SQLite")
    func oneCollector() async throws {
        let dir = try PublishFixtures.temporaryDirectory("pg-collector")
        defer { PublishFixtures.cleanUp(dir) }
        try C.publishFleet(dir)
        let database = try await PostgresTestDatabase("collector")
        defer { database.drop() }
        let a = try await OfflineServerProcess(arguments: ["--dir", dir, "--open-collector", "--reports-db", database.url])
        let b = try await OfflineServerProcess(arguments: ["--dir", dir, "--open-collector", "--reports-db", database.url])
        let lite = try await OfflineServerProcess(arguments: ["--dir", dir, "--open-collector", "--reports-db", dir + "/reports.sqlite"])
        do {
            let body = try C.body(Self.events())
            let unique = Self.events().count - 1
            async let first = C.post(a.baseURL, body)
            async let second = C.post(b.baseURL, body)
            let receipts = try await [first, second].map { try #require($0.receipt) }
            #expect(receipts.map(\.accepted).reduce(0, +) == unique, "\(receipts)")
            #expect(receipts.map(\.duplicates).reduce(0, +) == unique + 2, "\(receipts)")
            #expect(try await C.post(lite.baseURL, body).receipt?.accepted == unique)

            let fromA = try await C.statsText(a.baseURL), fromB = try await C.statsText(b.baseURL)
            #expect(fromA == fromB)
            #expect(fromA == (try await C.statsText(lite.baseURL)), "PostgreSQL and SQLite count alike")
            #expect(try await C.stats(a.baseURL)["events"] as? Int == unique)
            for app in ["fleet", "nobody"] {
                #expect(try await C.statsText(a.baseURL, app: app) == (try await C.statsText(lite.baseURL, app: app)))
            }
            // The dashboard's figures and chart come from the same rows on either store.
            let pageA = try await PublishHTTP.fetch(a.baseURL + "/dashboard?app=fleet")
            let pageLite = try await PublishHTTP.fetch(lite.baseURL + "/dashboard?app=fleet")
            #expect(pageA.status == 200 && pageLite.status == 200)
            let lines = { (page: Data) in
                String(decoding: page, as: UTF8.self).split(separator: "\n").filter { $0.contains("<tr class") || $0.contains("data-last=") }
                    .map { $0.replacingOccurrences(of: #"points="[^"]*""#, with: "", options: .regularExpression) }
            }
            #expect(lines(pageA.body) == lines(pageLite.body))
            #expect(!lines(pageA.body).isEmpty)
        } catch {
            for server in [a, b, lite] { await server.stop() }
            throw error
        }
        for server in [a, b, lite] { await server.stop() }

        // Restarted (migrations again) and a third server: still one run of each migration.
        let again = try await OfflineServerProcess(arguments: ["--dir", dir, "--open-collector", "--reports-db", database.url])
        let count = try await C.stats(again.baseURL)["events"] as? Int
        await again.stop()
        #expect(count == Self.events().count - 1)
        let names = try await CLI.run(
            [database.url, "-qAtc", "SELECT name FROM offline_server_migrations ORDER BY name"], executable: "/usr/bin/psql").stdout
        #expect(names == "v1\nv3\nv4\nv5\nv6\nv7\nv8\nv9\n", "each migration once")
    }

    @Test("report text reads back from PostgreSQL's array literal as sent: quotes and backslashes joined to a combining or prepended mark, NULL, empty")
    func arrayLiteralRoundTrip() async throws {
        let database = try await PostgresTestDatabase("arrayliteral")
        defer { database.drop() }
        // A `"` that a combining mark follows is one Character with it: a Character search
        // missed it and the element ended early (the batch failed, or fields shifted).
        let values: [String?] = ["a\"\u{301}b", "c\\\u{301}", "\u{600}\"", "\"\u{301},\"y", nil, "", "plain, {x}"]
        let literal = PostgresReportStore.arrayLiteral(values)
        let dir = try PublishFixtures.temporaryDirectory("pg-array")
        defer { PublishFixtures.cleanUp(dir) }
        try "SELECT coalesce(x, '<null>') FROM unnest(:'lit'::text[]) WITH ORDINALITY AS t(x, n) ORDER BY n;\n"
            .write(toFile: dir + "/q.sql", atomically: true, encoding: .utf8)
        let result = try await CLI.run([database.url, "-qAt", "-v", "lit=\(literal)", "-f", dir + "/q.sql"], executable: "/usr/bin/psql")
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.split(separator: "\n", omittingEmptySubsequences: false).dropLast().map(String.init)
                == values.map { $0 ?? "<null>" }, "\(literal)")
    }

    @Test("a database it cannot use stops the start with one line naming the cause: no TLS for sslmode=require, a wrong password, no such database")
    func failsFast() async throws {
        let dir = try PublishFixtures.temporaryDirectory("pg-fail-fast")
        defer { PublishFixtures.cleanUp(dir) }
        try C.publishFleet(dir)
        let server = try #require(PostgresTestDatabase.server.url)
        let executable = try #require(PublishFixtures.builtExecutable("offline-server"))
        var wrongPassword = try #require(URLComponents(string: server))
        wrongPassword.password = "not-the-password"
        var noDatabase = try #require(URLComponents(string: server))
        noDatabase.path = "/offline_test_no_such_database"
        let cases: [(url: String, cause: String)] = [
            (server + "?sslmode=require", "does not offer TLS"),
            (wrongPassword.string!, "password authentication failed"),
            (noDatabase.string!, "does not exist"),
        ]
        for (url, cause) in cases {
            let result = try await CLI.run(["--dir", dir, "--port", "0", "--open-collector", "--reports-db", url], executable: executable)
            #expect(result.status != 0, "\(url)")
            let lines = result.stderr.split(separator: "\n")
            let errors = lines.filter { $0.contains("reports database") || $0.contains("PSQLError") || $0.contains("error") }
            #expect(errors.count == 1 && errors.first?.contains(cause) == true, "\(url): \(result.stderr)")
            #expect(!result.stderr.contains("PSQLError") && !result.stderr.contains("not-the-password"), "\(result.stderr)")
        }
    }
}
