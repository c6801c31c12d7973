import Foundation
import OfflineServe
import Testing
@testable import OfflineAgent
import TestSupport

/// `GET /metrics` of `serve` as a scraper reads it: swift-metrics counters exported by
/// swift-prometheus from a registry each server owns.
@Suite("serve /metrics export")
struct ServeMetricsExportTests {
    typealias F = LocalServerTests

    /// Scrapes `/metrics` and parses it strictly (a malformed line fails the test).
    static func scrape(_ server: RunningLocalServer) async throws -> PrometheusExposition {
        let response = try await LocalHTTP.request(port: server.port, "/metrics")
        #expect(response.status == 200)
        #expect(response.header("content-type") == "text/plain; version=0.0.4; charset=utf-8")
        return try PrometheusExposition(parsing: response.text)
    }

    @Test("a scrape after real requests shows each count under its documented name and labels")
    func countsRealRequests() async throws {
        let f = try F.branches()
        try await withLocalServer(f) { server in
            for url in [
                "https://h5.example.invalid/mall/index.html", "https://h5.example.invalid/mall/pages/about.html",
                "https://other.example/x", "https://old.example.invalid/old/index.html",
            ] {
                let r1 = try await LocalHTTP.request(port: server.port, "/open?url=\(url.localQueryEncoded)")
                #expect(r1.status == 302)
            }
            let first = try await LocalHTTP.request(port: server.port, "/mall/index.html")
            #expect(first.status == 200)
            let etag = try #require(first.header("etag"))
            let r2 = try await LocalHTTP.request(port: server.port, "/mall/index.html", headers: [("If-None-Match", etag)])
            #expect(r2.status == 304)
            let r3 = try await LocalHTTP.request(port: server.port, "/mall/big.bin", headers: [("Range", "bytes=0-9")])
            #expect(r3.status == 206)
            let r4 = try await LocalHTTP.request(port: server.port, "/mall/big.bin", headers: [("Range", "bytes=999999-")])
            #expect(r4.status == 416)
            let r5 = try await LocalHTTP.request(port: server.port, "/mall/nope.js")
            #expect(r5.status == 404)
            let r6 = try await LocalHTTP.request(port: server.port, "/shop/index.html")
            #expect(r6.status == 404)
            let r7 = try await LocalHTTP.request(port: server.port, "/mall/index.html", host: "evil.example")
            #expect(r7.status == 403)
            let r8 = try await LocalHTTP.request(port: server.port, "/old/index.html")
            #expect(r8.status == 302)

            let scraped = try await Self.scrape(server)
            let expected: [(String, [String: String], Double)] = [
                ("offline_agent_offline_hits_total", ["app": "mall"], 2),
                ("offline_agent_network_fallbacks_total", ["app": "", "reason": "not-whitelisted"], 1),
                // One from /open, one from the kill switch on /old/….
                ("offline_agent_network_fallbacks_total", ["app": "old", "reason": "below-mini-version"], 2),
                ("offline_agent_file_responses_total", ["app": "mall", "code": "200"], 1),
                ("offline_agent_file_responses_total", ["app": "mall", "code": "304"], 1),
                ("offline_agent_file_responses_total", ["app": "mall", "code": "206"], 1),
                ("offline_agent_file_responses_total", ["app": "mall", "code": "416"], 1),
                ("offline_agent_file_responses_total", ["app": "mall", "code": "404"], 1),
                ("offline_agent_file_responses_total", ["app": "", "code": "404"], 1),
                ("offline_agent_file_responses_total", ["app": "old", "code": "302"], 1),
                ("offline_agent_forbidden_host_total", [:], 1),
                ("offline_agent_refused_connections_total", [:], 0),
                ("offline_agent_evicted_connections_total", [:], 0),
                ("offline_agent_timed_out_connections_total", ["timeout": "header"], 0),
                ("offline_agent_timed_out_connections_total", ["timeout": "idle"], 0),
            ]
            for (name, labels, value) in expected {
                #expect(scraped.value(name, labels) == value, "\(name) \(labels)")
            }
            // Nothing counted that was not asked for: every series is one of the above or the gauge.
            #expect(scraped.samples.count == expected.count + 1, "\(scraped.samples)")
            // The scrape's own connection holds a slot while the text is made (earlier ones
            // may not have given theirs back yet).
            #expect((scraped.value("offline_agent_open_connections") ?? 0) >= 1)

            // Each family: its documented type and a HELP line.
            let families = [
                "offline_agent_offline_hits_total", "offline_agent_network_fallbacks_total", "offline_agent_file_responses_total",
                "offline_agent_forbidden_host_total", "offline_agent_refused_connections_total",
                "offline_agent_evicted_connections_total", "offline_agent_timed_out_connections_total",
            ]
            for family in families {
                #expect(scraped.types[family] == "counter", "\(family)")
                #expect(scraped.help[family]?.isEmpty == false, "\(family)")
            }
            #expect(scraped.types["offline_agent_open_connections"] == "gauge")
            #expect(Set(scraped.types.keys) == Set(families + ["offline_agent_open_connections"]))

            // The accessors read the same registry the scrape does.
            let m = server.metrics
            #expect(m.offlineHits(app: "mall") == 2)
            #expect(m.networkFallbacks(app: nil, reason: .notWhitelisted) == 1)
            #expect(m.networkFallbacks(app: "old", reason: .belowMiniVersion) == 2)
            #expect(m.fileResponses(app: "mall", code: 206) == 1)
            #expect(m.fileResponses(app: "", code: 404) == 1)
            #expect(m.forbiddenHosts == 1)
        }
    }

    @Test("two servers in one process keep separate counts")
    func separateRegistries() async throws {
        let a = try F.mall(), b = try F.mall()
        try await withLocalServer(a) { first in
            try await withLocalServer(b) { second in
                for _ in 0..<3 { _ = try await LocalHTTP.request(port: first.port, "/mall/index.html") }
                for _ in 0..<5 { _ = try await LocalHTTP.request(port: second.port, "/mall/index.html") }
                _ = try await LocalHTTP.request(port: second.port, "/mall/nope.js")
                _ = try await LocalHTTP.request(port: first.port, "/mall/index.html", host: "evil.example")

                let one = try await Self.scrape(first), two = try await Self.scrape(second)
                #expect(one.value("offline_agent_file_responses_total", ["app": "mall", "code": "200"]) == 3)
                #expect(two.value("offline_agent_file_responses_total", ["app": "mall", "code": "200"]) == 5)
                #expect(one.value("offline_agent_file_responses_total", ["app": "mall", "code": "404"]) == nil)
                #expect(two.value("offline_agent_file_responses_total", ["app": "mall", "code": "404"]) == 1)
                #expect(one.value("offline_agent_forbidden_host_total") == 1)
                #expect(two.value("offline_agent_forbidden_host_total") == 0)
                #expect(first.metrics.fileResponses(app: "mall", code: 200) == 3)
                #expect(second.metrics.fileResponses(app: "mall", code: 200) == 5)
            }
        }
        // A metrics object of its own (a host app's, say) starts from nothing.
        #expect(LocalServerMetrics().fileResponses(app: "mall", code: 200) == 0)
    }

    @Test("two scrapes of the same counts read the same, families and samples in name order")
    func stableOrder() async throws {
        let f = try F.branches()
        try await withLocalServer(f) { server in
            for app in ["old", "mall", "gray", "mall"] {
                _ = try await LocalHTTP.request(port: server.port, "/\(app)/index.html")
            }
            _ = try await LocalHTTP.request(port: server.port, "/mall/nope.js")
            let one = try await LocalHTTP.request(port: server.port, "/metrics").text
            let two = try await LocalHTTP.request(port: server.port, "/metrics").text
            let parsed = try PrometheusExposition(parsing: one), again = try PrometheusExposition(parsing: two)
            // The same series in the same order, and the same counts. Gauges of the moment
            // (open connections: the first scrape's connection may still be closing) may move.
            #expect(Self.series(parsed) == Self.series(again))
            let counters = { (exposition: PrometheusExposition) in
                exposition.samples.filter { exposition.types[$0.name] == "counter" || $0.name.hasSuffix("_total") }
            }
            #expect(counters(parsed) == counters(again))
            let families = one.split(separator: "\n").filter { $0.hasPrefix("# TYPE ") }.map { $0.split(separator: " ")[2] }
            #expect(families == families.sorted())
            let files = parsed.samples.filter { $0.name == "offline_agent_file_responses_total" }
            let keys = files.map { "\($0.labels["app"]!) \($0.labels["code"]!)" }
            #expect(keys == ["gray 302", "mall 200", "mall 404", "old 302"])
        }
    }

    /// Each sample's name and labels, in exposition order.
    static func series(_ exposition: PrometheusExposition) -> [String] {
        exposition.samples.map { sample in
            sample.name + "{" + sample.labels.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ",") + "}"
        }
    }
}
