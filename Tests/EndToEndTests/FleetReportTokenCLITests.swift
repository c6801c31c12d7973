import Foundation
import OfflineAgent
import Testing
import TestSupport

/// `reportToken` against a real `offline-server --report-token`: the device's events are
/// stored with the right token, kept (and said why) without it, and the token recorded by
/// the sync carries later lifecycle and `serve` reports; it is never printed.
@Suite("Fleet reports: bearer token (CLI)")
struct FleetReportTokenCLITests {
    static let token = "fleet-Token_7f3a9c.e1~x"

    @Test("a token-protected collector: missing or wrong is 401 and kept, the fixed config delivers; mark-good and serve's usage use the recorded token")
    func protectedCollector() async throws {
        let h = try SyncHarness()
        // On trial (the publisher asks), so mark-good is a transition that reports.
        h.origin.setManifest(h.full("1.0.0", ["trialLaunches": 3]))
        let dir = TemporaryDirectory("token-collector")
        let server = try await OfflineServerProcess(arguments: [
            "--dir", dir.path, "--reports-db", dir.file("reports.sqlite"), "--report-token", Self.token,
        ])
        defer { server.stopInBackground() }
        let report = server.baseURL + "/report"
        let config = dir.file("agent.json")
        func write(_ token: String?) throws {
            let entry = token.map { #", "reportToken": "\#($0)""# } ?? ""
            try """
                {"root": "\(h.root.path)", "allowUnsigned": true, "report": "\(report)"\(entry),
                 "apps": [{"app": "mall", "manifest": "\(h.origin.manifestURL.absoluteString)"}]}
                """.write(toFile: config, atomically: true, encoding: .utf8)
        }
        let sync = ["sync", "--config", config, "--json", "--report-deadline", "60", "--verbose"]
        func stored() async throws -> Int? { try await FleetStats.stats(server.baseURL, app: "mall")["events"] as? Int }
        let queue = ReportQueue(root: h.root.path, url: try #require(URL(string: report)), maxEvents: 1000)

        // No token: installed all the same, the event kept, and the log says what is missing.
        try write(nil)
        let missing = try await CLI.run(sync)
        #expect(missing.status == 0 && CLI.json(missing.stdout)?["result"] as? String == "updated", "\(missing.stderr)")
        #expect(missing.stderr.contains("the collector wants a bearer token; set reportToken in the device config"), "\(missing.stderr)")
        #expect(try await stored() == 0 && queue.pending() == 1)

        // A wrong token: the change lifts the backoff, so this throttled run asks again and is refused.
        try write("not-the-token")
        let wrong = try await CLI.run(sync)
        #expect(CLI.json(wrong.stdout)?["result"] as? String == "throttled", "\(wrong.stderr)")
        #expect(wrong.stderr.contains("the collector refused the bearer token; check reportToken in the device config"), "\(wrong.stderr)")
        #expect(!wrong.stderr.contains("not-the-token") && !wrong.stdout.contains("not-the-token"))
        #expect(try await stored() == 0 && queue.pending() == 1)

        // Fixed: the queued event arrives, once.
        try write(Self.token)
        let fixed = try await CLI.run(sync)
        #expect(fixed.status == 0, "\(fixed.stderr)")
        #expect(try await stored() == 1 && queue.pending() == 0)
        let mode = try #require(try FileManager.default.attributesOfItem(atPath: "\(queue.directory)/token")[.posixPermissions] as? Int)
        #expect(mode & 0o777 == 0o600)

        // Lifecycle and serve know no token: the recorded one carries their reports.
        let good = try await CLI.run(["mark-good", "--root", h.root.path, "--app", "mall"])
        #expect(good.status == 0, "\(good.stderr)")
        let (serve, port) = try await LifecycleCLITests.serve(h.root.path, ["--report-interval", "60", "--report-deadline", "60"])
        _ = try await LifecycleCLITests.open(port)
        serve.process.terminate()
        let stopped = await CLI.finish(serve)
        #expect(stopped.status == 0, "\(stopped.stderr)")
        let stats = try await FleetStats.stats(server.baseURL, app: "mall")
        #expect(stats["events"] as? Int == 3, "updated, marked-good, usage: \(stats)")
        #expect(queue.pending() == 0)

        // Nothing prints the token: not sync, status, check-config nor serve.
        let status = try await CLI.run(["status", "--root", h.root.path, "--app", "mall", "--json"])
        let check = try await CLI.run(["check-config", config])
        #expect(check.stdout.contains("  report: \(report)\n  report token: set"), "\(check.stdout)")
        for output in [missing, wrong, fixed, good, stopped, status, check] {
            #expect(!output.stdout.contains(Self.token) && !output.stderr.contains(Self.token))
        }
    }

    @Test("serve --report URL --report-token-file FILE: usage reports carry that token; without --report it is a usage error")
    func serveTokenFile() async throws {
        let collector = try ReportCollector()
        collector.token = Self.token
        let h = try SyncHarness()
        try await h.install("1.0.0")  // reporting nowhere: serve alone knows the collector
        let dir = TemporaryDirectory("serve-token")
        let file = dir.file("report-token")
        try Self.token.write(toFile: file, atomically: true, encoding: .utf8)
        let (serve, port) = try await LifecycleCLITests.serve(h.root.path, [
            "--report", collector.url.absoluteString, "--report-token-file", file, "--report-interval", "60", "--report-deadline", "60",
        ])
        _ = try await LifecycleCLITests.open(port)
        serve.process.terminate()
        let stopped = await CLI.finish(serve)
        #expect(stopped.status == 0, "\(stopped.stderr)")
        #expect(collector.events.map { $0["event"] as? String } == ["usage"], "\(stopped.stderr)")
        #expect(collector.authorizations == ["Bearer \(Self.token)"])
        #expect(!stopped.stdout.contains(Self.token) && !stopped.stderr.contains(Self.token))
        let alone = try await CLI.run(["serve", "--root", h.root.path, "--port", "0", "--report-token-file", file])
        #expect(alone.status == 64 && alone.stderr.contains("--report-token-file needs --report"), "\(alone.stderr)")
    }

    @Test("--report-token-file: the token from a file (not the command line); unreadable, invalid or without --report is a usage error")
    func tokenFile() async throws {
        let collector = try ReportCollector()
        collector.token = Self.token
        let h = try SyncHarness()
        h.origin.setManifest(h.full("1.0.0"))
        let dir = TemporaryDirectory("token-file")
        let file = dir.file("report-token")
        try (Self.token + "\n").write(toFile: file, atomically: true, encoding: .utf8)
        let base = ["sync", "--allow-unsigned", "--root", h.root.path, "--app", "mall", "--manifest", h.origin.manifestURL.absoluteString]
        let synced = try await CLI.run(base + ["--report", collector.url.absoluteString, "--report-token-file", file, "--report-deadline", "60"])
        #expect(synced.status == 0, "\(synced.stderr)")
        #expect(collector.events.count == 1 && collector.authorizations == ["Bearer \(Self.token)"])
        // With --config, the file given on the command line goes with the file's report URL
        // (were it not applied, this sync would remove the recorded token and meet a 401).
        let config = dir.file("agent.json")
        try """
            {"root": "\(h.root.path)", "allowUnsigned": true, "report": "\(collector.url.absoluteString)",
             "apps": [{"app": "mall", "manifest": "\(h.origin.manifestURL.absoluteString)"}]}
            """.write(toFile: config, atomically: true, encoding: .utf8)
        h.origin.setManifest(h.full("1.1.0"))
        let viaConfig = try await CLI.run(["sync", "--config", config, "--force", "--report-token-file", file, "--report-deadline", "60"])
        #expect(viaConfig.status == 0, "\(viaConfig.stderr)")
        #expect(collector.events.count == 2 && collector.authorizations == [String?](repeating: "Bearer \(Self.token)", count: 2))

        let bad = dir.file("bad-token")
        try "two words\n".write(toFile: bad, atomically: true, encoding: .utf8)
        let failures: [([String], String)] = [
            (["--report", collector.url.absoluteString, "--report-token-file", dir.file("none")], "--report-token-file cannot be read"),
            (["--report", collector.url.absoluteString, "--report-token-file", bad], "--report-token-file must hold 1 to 512 visible ASCII characters"),
            (["--report-token-file", file], "--report-token-file needs --report"),
        ]
        for (extra, message) in failures {
            let result = try await CLI.run(base + extra)
            #expect(result.status == 64 && result.stderr.contains(message), "\(extra): \(result.stderr)")
            #expect(!result.stderr.contains("two words") && !result.stderr.contains(Self.token))
        }
    }
}
