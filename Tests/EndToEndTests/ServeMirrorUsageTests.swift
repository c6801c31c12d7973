import Foundation
import OfflineAgent
import Testing
import TestSupport

/// `serve`'s `usage` events count what mirror hosts do (docs/PROTOCOL.md, "Fleet reports",
/// Usage): a request the package answers is an offline hit; a GET or HEAD of a whitelisted
/// path sent to the origin is a fallback with its reason; other forwarded requests (other
/// methods, paths no whitelist selects) are the origin's own traffic and count nowhere.
@Suite("serve usage on mirror hosts")
struct ServeMirrorUsageTests {
    /// Origins nothing listens on: what is forwarded fails at once (502), which changes no count.
    static let spaOrigin = "http://127.0.0.1:1"
    static let mallOrigin = "http://127.0.0.1:2"

    /// A root with `spa` 1.0.0 on the whole of `spaOrigin` (a single-page app) and `mall`
    /// 1.0.0 on `mallOrigin/mall/` outside its rollout (the kill switch: never served).
    static func store() throws -> LocalStoreFixture {
        let f = LocalStoreFixture()
        let pages = ["index.html": "<script src=\"/assets/index.js\"></script>", "assets/index.js": "1", "docs/index.html": "docs"]
        try f.add("spa", version: "1.0.0", fixture: nil, files: pages.mapValues { Array($0.utf8) }, whitelist: ["\(spaOrigin)/"], fallback: "index.html")
        try f.add("mall", version: "1.0.0", whitelist: ["\(mallOrigin)/mall/"], rollout: 0)
        return f
    }

    /// The sums over every `usage` event of `app` received: hits, fallbacks by reason.
    static func totals(_ collector: ReportCollector, app: String) -> (hits: Int, fallbacks: [String: Int]) {
        var hits = 0, fallbacks: [String: Int] = [:]
        for event in collector.events where event["event"] as? String == "usage" && event["app"] as? String == app {
            hits += event["offlineHits"] as? Int ?? 0
            for (reason, count) in event["fallbacks"] as? [String: Int] ?? [:] { fallbacks[reason, default: 0] += count }
        }
        return (hits, fallbacks)
    }

    /// One round of requests on both mirror hosts; what it must add to each app's totals.
    static func round(port: Int) async throws -> (spa: Int, missing: Int, killed: Int) {
        let spa = "\(MirrorOrigin(url: URL(string: spaOrigin)!)!.mirrorHost):\(port)"
        let mall = "\(MirrorOrigin(url: URL(string: mallOrigin)!)!.mirrorHost):\(port)"
        func request(_ host: String, _ target: String, method: String = "GET", headers: [(String, String)] = []) async throws -> LocalHTTP.Response {
            try await LocalHTTP.request(port: port, target, method: method, headers: headers, host: host)
        }
        // Offline hits: files, a HEAD, a single-page route's navigation, a directory's redirect.
        for _ in 0..<3 {
            let file = try await request(spa, "/assets/index.js")
            #expect(file.status == 200 && file.header("x-offline-source") == "package")
        }
        #expect(try await request(spa, "/index.html", method: "HEAD").header("x-offline-source") == "package")
        let route = try await request(spa, "/orders/42", headers: [("Sec-Fetch-Mode", "navigate")])
        #expect(route.status == 200 && route.header("x-offline-source") == "package")
        let directory = try await request(spa, "/docs")
        #expect(directory.status == 301 && directory.header("x-offline-source") == "package")
        // Fallbacks: whitelisted files the package lacks, and the kill switch's whitelisted path.
        for _ in 0..<2 { #expect(try await request(spa, "/assets/missing.js").header("x-offline-source") == "origin") }
        for _ in 0..<3 { #expect(try await request(mall, "/mall/index.html").header("x-offline-source") == "origin") }
        // Neither: an API call (another method), and a path outside mall's whitelist.
        #expect(try await request(spa, "/api/login", method: "POST").header("x-offline-source") == "origin")
        #expect(try await request(mall, "/api/items").header("x-offline-source") == "origin")
        return (spa: 6, missing: 2, killed: 3)
    }

    @Test("mirror-host hits and whitelisted fallbacks reach the collector per app and version; API calls count nowhere")
    func mirrorUsage() async throws {
        let f = try Self.store()
        let collector = try ReportCollector()
        defer { collector.stop() }
        // A flush every second (1/60 minute), so events come while serve runs.
        let (server, port) = try await LifecycleCLITests.serve(
            f.root.path, ["--report", collector.url.absoluteString, "--report-interval", "\(1.0 / 60)", "--report-deadline", "300"])
        var stopped = false
        defer { if !stopped { CLI.terminateInBackground(server) } }

        var expected = (spa: 0, missing: 0, killed: 0)
        for _ in 0..<2 {
            let added = try await Self.round(port: port)
            expected = (expected.spa + added.spa, expected.missing + added.missing, expected.killed + added.killed)
            let want = expected
            // Bounded: flushes come every second; 10 minutes is a hang, not a speed.
            let arrived = await collector.waitUntil(timeout: 600) {
                Self.totals(collector, app: "spa") == (want.spa, ["missing-file": want.missing])
                    && Self.totals(collector, app: "mall") == (0, ["outside-rollout": want.killed])
            }
            #expect(arrived, "spa \(Self.totals(collector, app: "spa")), mall \(Self.totals(collector, app: "mall"))")
        }

        // The last flush on stop sends nothing more: each count was reported once.
        server.process.terminate()
        let result = await CLI.finish(server)
        stopped = true
        #expect(result.status == 0, "\(result.stderr)")
        #expect(Self.totals(collector, app: "spa") == (expected.spa, ["missing-file": expected.missing]))
        #expect(Self.totals(collector, app: "mall") == (0, ["outside-rollout": expected.killed]))
        let usage = collector.events.filter { $0["event"] as? String == "usage" }
        #expect(usage.count >= 4, "at least one event per app per round: \(usage.count)")
        // The root's id, as its syncs report (`--device-id` only places the device in rollouts).
        let device = try String(contentsOfFile: f.root.path + "/device-id", encoding: .utf8)
        for event in usage {
            #expect(event["version"] as? String == "1.0.0" && event["device"] as? String == device, "\(event)")
            #expect(Set((event["fallbacks"] as? [String: Int] ?? [:]).keys).isSubset(of: ["missing-file", "outside-rollout"]), "\(event)")
        }
        #expect(Set(usage.compactMap { $0["app"] as? String }) == ["spa", "mall"])
    }
}
