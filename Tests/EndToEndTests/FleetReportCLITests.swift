import Foundation
import OfflineAgent
import Testing
import TestSupport

/// Fleet reports and `--network auto` through the real `offline-agent` process.
@Suite("Fleet reports (CLI)")
struct FleetReportCLITests {
    private struct Setup {
        let h: SyncHarness
        let collector: ReportCollector
        var sync: [String] {
            ["sync", "--allow-unsigned", "--root", h.root.path, "--app", "mall", "--manifest", h.origin.manifestURL.absoluteString,
             "--report", collector.url.absoluteString, "--report-deadline", "60", "--json"]
        }

        init() throws {
            h = try SyncHarness()
            collector = try ReportCollector()
            // On trial (the publisher asks), so a later mark-good is a transition that reports.
            h.origin.setManifest(h.full("1.0.0", ["trialLaunches": 3]))
        }

        var queue: ReportQueue? { ReportQueue.all(root: h.root.path, maxEvents: 1000).first }
    }

    @Test("kill -9 between queueing and posting: the next run delivers the event once")
    func killBeforePost() async throws {
        let s = try Setup()
        let crashed = try await CLI.run(s.sync, environment: ["OFFLINE_AGENT_CRASH_AT": "before-report-post"])
        #expect(crashed.signaled, "\(crashed.stderr)")
        #expect(s.h.activeMatches("1.0.0"))
        #expect(s.queue?.pending() == 1 && s.collector.posts == 0)
        let status = CLI.json(try await CLI.run(["status", "--root", s.h.root.path, "--app", "mall", "--json"]).stdout)
        let report = status?["report"] as? [String: Any]
        #expect(report?["url"] as? String == s.collector.url.absoluteString && report?["pending"] as? Int == 1)
        #expect(report?["dropped"] as? Int == 0 && report?["rejected"] as? Int == 0)
        // A throttled run checks nothing but sends the queue.
        let next = try await CLI.run(s.sync)
        #expect(next.status == 0, "\(next.stderr)")
        #expect(CLI.json(next.stdout)?["result"] as? String == "throttled")
        #expect(s.collector.events.map { $0["event"] as? String } == ["updated"])
        #expect(s.collector.duplicates == 0 && s.queue?.pending() == 0)
    }

    @Test("kill -9 mid-post: the batch is sent again, none lost, the duplicate only by id, order kept")
    func killMidPost() async throws {
        let s = try Setup()
        s.collector.mode = .storeThenStall(seconds: 600)
        // The post must still be waiting when the kill comes, however loaded the machine:
        // a deadline as long as the stall, not the 60 s a starved test task can outlast.
        let running = try CLI.start(s.sync.map { $0 == "60" ? "600" : $0 })
        #expect(await s.collector.waitForEvents(1))
        kill(running.process.processIdentifier, SIGKILL)
        let killed = await CLI.finish(running)
        #expect(killed.signaled)
        #expect(s.h.activeMatches("1.0.0") && s.queue?.pending() == 1)
        // A transition while the agent is down joins the queue behind the unacknowledged event.
        #expect(try await CLI.run(["mark-good", "--root", s.h.root.path, "--app", "mall"]).status == 0)
        s.collector.mode = .accept
        let next = try await CLI.run(s.sync)
        #expect(next.status == 0, "\(next.stderr)")
        let events = s.collector.events
        #expect(events.map { $0["event"] as? String } == ["updated", "marked-good"])
        #expect(s.collector.duplicates == 1 && s.queue?.pending() == 0)
        #expect(Set(events.compactMap { $0["id"] as? String }).count == 2)
    }

    @Test("a stalled collector never fails the sync nor changes its exit status")
    func stalledCollector() async throws {
        let s = try Setup()
        s.collector.mode = .stall(seconds: 600)
        let started = Date()
        let result = try await CLI.run(s.sync.filter { $0 != "--report-deadline" && $0 != "60" })
        #expect(Date().timeIntervalSince(started) < 240)  // generous (loaded CI): the deadline is 3 s, the stall 600 s
        #expect(result.status == 0 && CLI.json(result.stdout)?["result"] as? String == "updated", "\(result.stderr)")
        #expect(s.h.activeMatches("1.0.0") && s.queue?.pending() == 1)
    }

    @Test("serve: offline hits and fallbacks become per-app usage events, sent when serve stops")
    func serveUsage() async throws {
        let s = try Setup()
        #expect(try await CLI.run(s.sync).status == 0)
        #expect(await s.collector.waitForEvents(1))
        let (server, port) = try await LifecycleCLITests.serve(s.h.root.path, ["--report-interval", "60", "--report-deadline", "60"])
        for _ in 0..<3 { #expect(try await LifecycleCLITests.open(port).header("location") == "http://h5.example.com.localhost:\(port)/mall/index.html") }
        for _ in 0..<2 { _ = try await LifecycleCLITests.open(port, "no-such-page.html") }
        _ = try await LocalHTTP.request(port: port, "/open?url=\("https://elsewhere.example.com/".localQueryEncoded)")
        server.process.terminate()
        let stopped = await CLI.finish(server)
        #expect(stopped.status == 0, "\(stopped.stderr)")
        #expect(await s.collector.waitForEvents(2))
        let usage = try #require(s.collector.events.last)
        #expect(usage["event"] as? String == "usage" && usage["app"] as? String == "mall" && usage["version"] as? String == "1.0.0")
        #expect(usage["offlineHits"] as? Int == 3)
        #expect(usage["fallbacks"] as? [String: Int] == ["missing-file": 2])
        #expect((usage["periodSeconds"] as? Int).map { $0 >= 1 } == true)
        #expect(usage["device"] as? String == s.collector.events.first?["device"] as? String)
    }

    @Test("config: report at the top level and per app (the app's wins); check-config shows it; a bad URL is a usage error")
    func config() async throws {
        let s = try Setup()
        let other = try ReportCollector()
        let dir = TemporaryDirectory("config")
        let file = dir.file("agent.json")
        let manifest = s.h.origin.manifestURL.absoluteString
        func write(_ top: String, _ app: String) throws {
            try """
                {"root": "\(s.h.root.path)", "allowUnsigned": true, "report": "\(top)",
                 "apps": [{"app": "mall", "manifest": "\(manifest)", "report": "\(app)"}]}
                """.write(toFile: file, atomically: true, encoding: .utf8)
        }
        try write(other.url.absoluteString, s.collector.url.absoluteString)
        let check = try await CLI.run(["check-config", file])
        #expect(check.stdout.contains("  report: \(s.collector.url.absoluteString)"), "\(check.stdout)")
        let synced = try await CLI.run(["sync", "--config", file, "--json", "--report-deadline", "60"])
        #expect(synced.status == 0, "\(synced.stderr)")
        #expect(s.collector.events.map { $0["event"] as? String } == ["updated"] && other.posts == 0)
        try write("ftp://x/report", s.collector.url.absoluteString)
        for command in [["sync", "--config", file], ["check-config", file]] {
            let bad = try await CLI.run(command)
            #expect(bad.status == 64 && bad.stderr.contains("report: invalid report URL 'ftp://x/report'"), "\(bad.stderr)")
        }
        let flag = try await CLI.run(["sync", "--allow-unsigned", "--root", s.h.root.path, "--app", "mall", "--manifest", manifest, "--report", "not a url"])
        #expect(flag.status == 64, "\(flag.stderr)")
    }

    /// What real `nmcli -t -f GENERAL.STATE,GENERAL.METERED device show` prints (terse
    /// mode: `FIELD:value`, one block per device, blank lines between), for an ethernet
    /// device in each metered state next to an unmanaged loopback. The fake `nmcli`
    /// put first on PATH prints it; status 8 is nmcli's "NetworkManager is not running".
    static let nmcliTable: [(output: String, status: Int, expected: String, logLines: Int)] = [
        ("GENERAL.STATE:100 (connected)\nGENERAL.METERED:yes\n\nGENERAL.STATE:10 (unmanaged)\nGENERAL.METERED:unknown\n", 0, "deferred", 0),
        ("GENERAL.STATE:100 (connected)\nGENERAL.METERED:yes (guessed)\n\nGENERAL.STATE:10 (unmanaged)\nGENERAL.METERED:unknown\n", 0, "deferred", 0),
        ("GENERAL.STATE:100 (connected)\nGENERAL.METERED:no (guessed)\n\nGENERAL.STATE:10 (unmanaged)\nGENERAL.METERED:unknown\n", 0, "updated", 0),
        ("GENERAL.STATE:100 (connected)\nGENERAL.METERED:no\n", 0, "updated", 0),
        ("", 8, "updated", 1),
        ("GENERAL.STATE:30 (disconnected)\nGENERAL.METERED:unknown\n", 0, "updated", 1),
    ]

    @Test("--network auto reads nmcli: metered defers a wifi-only manifest; unreadable is one log line and unmetered",
          arguments: nmcliTable)
    func networkAuto(output: String, status: Int, expected: String, logLines: Int) async throws {
        let s = try Setup()
        s.h.origin.setManifest(s.h.full("1.0.0", ["networkType": "wifi"]))
        let bin = TemporaryDirectory("nmcli")
        let script = "#!/bin/sh\nprintf '%s' '\(output)'\n" + (status == 0 ? "" : "echo 'Error: NetworkManager is not running.' >&2\n") + "exit \(status)\n"
        _ = FileManager.default.createFile(atPath: bin.file("nmcli"), contents: Data(script.utf8), attributes: [.posixPermissions: 0o755])
        let path = "\(bin.path):\(ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin")"
        // Explicit auto and the default behave the same.
        for extra in [["--network", "auto"], []] {
            let result = try await CLI.run(s.sync + ["--force"] + extra, environment: ["PATH": path])
            #expect(result.status == 0, "\(result.stderr)")
            #expect(CLI.json(result.stdout)?["result"] as? String == expected, "\(result.stdout)")
            let lines = result.stderr.split(separator: "\n").filter { $0.contains("network auto") }
            #expect(lines.count == logLines, "\(result.stderr)")
            if expected == "updated" { break }  // installed: the next run has nothing to decide
        }
        if expected == "deferred" {
            // An explicit network wins over the system's answer.
            let explicit = try await CLI.run(s.sync + ["--force", "--network", "unmetered"], environment: ["PATH": path])
            #expect(CLI.json(explicit.stdout)?["result"] as? String == "updated", "\(explicit.stderr)")
        }
    }
}
