import Foundation
import TestSupport
import Testing

/// What keeps a collector in the field bounded and private: `/metrics` series only for the
/// publish directory's apps and versions however many names devices invent, and a bearer
/// token on `POST /report` (given on the command line or in `--config`).
@Suite("Fleet reports: bounded labels and report token")
struct ReportAccessTests {
    typealias C = FleetReportClient

    @Test("2000 events with made-up apps and versions add a handful of /metrics lines, not thousands; a batch names 16 apps, 64 versions at most")
    func cardinalityIsBounded() async throws {
        let dir = try PublishFixtures.temporaryDirectory("cardinality")
        defer { PublishFixtures.cleanUp(dir) }
        try await C.withServer(database: dir + "/reports.sqlite") { server in
            let base = server.baseURL
            // Every family touched once with known names, so the count below is what made-up names add.
            let known = [
                C.event("updated", version: "2.0.0", ["via": "patch", "bytes": 10, "fullSize": 100]),
                C.event("failed", version: "2.1.0", ["errorCode": "network"]),
                C.event("rolled-back", version: "1.0.0", ["previousVersion": "2.0.0"]),
                C.event("usage", ["offlineHits": 3, "fallbacks": ["missing-file": 1]]),
            ]
            #expect(try await C.post(base, try C.body(known)).receipt?.accepted == 4)
            let before = try await PublishHTTP.fetch(base + "/metrics").body
            var invented: [String: Int] = [:]
            for batch in 0..<16 {
                // As many names as a batch may carry: 16 apps, 64 versions.
                let events = (0..<125).map { index -> [String: Any] in
                    let app = "made-up-\(batch)-\(index % 16)", version = "\(batch).\(index % 64).7"
                    invented[app, default: 0] += 1
                    let kinds = ["updated", "failed", "rolled-back", "usage"]
                    return C.event(kinds[(batch * 125 + index) % 4], app: app, version: version, ["via": "full", "errorCode": "network"])
                }
                #expect(try await C.post(base, try C.body(events)).receipt?.accepted == 125)
            }
            // One more of either is refused whole.
            let apps = (0..<17).map { C.event("updated", app: "too-many-\($0)", version: "1.0.0", ["via": "full"]) }
            let tooManyApps = try await C.post(base, try C.body(apps))
            #expect(tooManyApps.status == 400 && tooManyApps.body.contains("more than 16 apps"), "\(tooManyApps.body)")
            let versions = (0..<65).map { C.event("updated", version: "7.\($0).0", ["via": "full"]) }
            let tooManyVersions = try await C.post(base, try C.body(versions))
            #expect(tooManyVersions.status == 400 && tooManyVersions.body.contains("more than 64 versions"), "\(tooManyVersions.body)")
            // Counted by bytes, as rows are keyed: 65 spellings of "KKKKKKK" with the Kelvin sign
            // (U+212A), which Swift's == takes for one string, are 65 versions.
            let spellings = (0..<65).map { bits in
                String(String.UnicodeScalarView((0..<7).map { bits >> $0 & 1 == 1 ? "\u{212A}" : "K" }))
            }
            let kelvin = spellings.map { C.event("updated", version: $0, ["via": "full"]) }
            let tooManyKelvin = try await C.post(base, try C.body(kelvin))
            #expect(tooManyKelvin.status == 400 && tooManyKelvin.body.contains("more than 64 versions"), "\(tooManyKelvin.status) \(tooManyKelvin.body)")
            // The publish directory's app with versions it never published: `other` too.
            let strays = (0..<50).map { C.event("updated", version: "9.\($0).0", ["via": "full"]) }
            #expect(try await C.post(base, try C.body(strays)).receipt?.accepted == 50)
            let after = String(decoding: try await PublishHTTP.fetch(base + "/metrics").body, as: UTF8.self)
            let lines = { (text: String) in text.split(separator: "\n").filter { $0.contains("offline_server_report_") }.count }
            let added = lines(after) - lines(String(decoding: before, as: UTF8.self))
            #expect(added <= 12, "made-up names added \(added) lines")
            #expect(!after.contains("made-up-"))
            #expect(!after.contains("9.1.0"))
            let metrics = try PrometheusExposition(parsing: after)
            #expect(metrics.value("offline_server_report_events_total", ["app": "other", "event": "updated"]) == 500)
            #expect(metrics.value("offline_server_report_updates_total", ["app": "other", "version": "other", "via": "full"]) == 500)
            #expect(metrics.value("offline_server_report_updates_total", ["app": "fleet", "version": "other", "via": "full"]) == 50)
            // /stats keeps every name as sent.
            #expect(try await C.stats(base, app: "made-up-0-0")["events"] as? Int == invented["made-up-0-0"])
        }
    }

    @Test("--report-token (and reportToken in --config): POST /report needs the bearer token; 401 otherwise, nothing stored")
    func reportToken() async throws {
        let dir = try PublishFixtures.temporaryDirectory("report-token")
        defer { PublishFixtures.cleanUp(dir) }
        try C.publishFleet(dir)
        let token = "t0k-" + C.newID()
        let config = dir + "/server.json"
        try Data(#"{"reportToken": "\#(token)"}"#.utf8).write(to: URL(fileURLWithPath: config))
        for arguments in [["--report-token", token], ["--config", config]] {
            let server = try await OfflineServerProcess(arguments: ["--dir", dir, "--reports-db", dir + "/\(arguments[0]).sqlite"] + arguments)
            do {
                let body = try C.body([C.event("updated", ["via": "full"])])
                for headers in [[], ["Authorization: Bearer wrong"], ["Authorization: Bearer \(token)x"], ["Authorization: Basic \(token)"]] {
                    let refused = try await C.post(server.baseURL, body, headers: headers)
                    #expect(refused.status == 401, "\(arguments) \(headers)")
                }
                #expect(try await C.stats(server.baseURL)["events"] as? Int == 0)
                let accepted = try await C.post(server.baseURL, body, headers: ["Authorization: Bearer \(token)"])
                #expect(accepted.receipt?.accepted == 1, "\(arguments)")
                #expect(try await C.stats(server.baseURL)["events"] as? Int == 1)
            } catch {
                await server.stop()
                throw error
            }
            await server.stop()
        }
        let executable = try #require(PublishFixtures.builtExecutable("offline-server"))
        // A config file with a key the server does not know is refused at start, named.
        try Data(#"{"reportTokn": "x"}"#.utf8).write(to: URL(fileURLWithPath: config))
        let refused = try await CLI.run(["--dir", dir, "--config", config, "--port", "0"], executable: executable)
        #expect(refused.status == 64)
        #expect(refused.stderr.contains("unknown key 'reportTokn'"), "\(refused.stderr)")
        // Rules that cannot be read are refused at start, naming the part.
        let badRules = try await CLI.run(["--dir", dir, "--open-collector", "--auto-halt", "failure-rate>5", "--port", "0"], executable: executable)
        #expect(badRules.status == 64)
        #expect(badRules.stderr.contains("cannot read 'failure-rate>5'"), "\(badRules.stderr)")
    }
}
