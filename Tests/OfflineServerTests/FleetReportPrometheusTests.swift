import Foundation
import TestSupport
import Testing

/// A real Prometheus (Debian `prometheus`, installed by scripts/install-deps.sh)
/// scrapes the server's `/metrics` every second; its query API must return the fleet
/// counters that were posted.
@Suite("Fleet reports: Prometheus scrape")
struct FleetReportPrometheusTests {
    typealias C = FleetReportClient

    static let binary = PrometheusProcess.binary

    @Test("Prometheus scrapes offline-server and its query API returns the posted counters")
    func scrapedByPrometheus() async throws {
        guard FileManager.default.isExecutableFile(atPath: Self.binary) else {
            Issue.record("\(Self.binary) is missing: scripts/install-deps.sh installs Debian's prometheus")
            return
        }
        let dir = try PublishFixtures.temporaryDirectory("fleet-prometheus")
        defer { PublishFixtures.cleanUp(dir) }
        try await C.withServer(database: dir + "/reports.sqlite") { server in
            let events = [
                C.event("updated", device: "d1", ["via": "patch", "bytes": 250, "fullSize": 1000]),
                C.event("updated", device: "d2", ["via": "patch", "bytes": 150, "fullSize": 1000]),
                C.event("updated", device: "d3", ["via": "full", "bytes": 1000, "fullSize": 1000]),
                C.event("failed", device: "d4", ["errorCode": "hash-mismatch"]),
                C.event("usage", device: "d1", ["offlineHits": 75, "fallbacks": ["outside-rollout": 25]]),
            ]
            #expect(try await C.post(server.baseURL, try C.body(events)).receipt?.accepted == 5)

            let prometheus = try await PrometheusProcess.start(scraping: server.port, in: dir)
            defer { prometheus.stop() }
            let expected: [(query: String, value: Double)] = [
                (#"sum(offline_server_report_updates_total{app="fleet"})"#, 3),
                (#"offline_server_report_updates_total{app="fleet",version="2.0.0",via="patch"}"#, 2),
                (#"offline_server_report_failures_total{app="fleet",cause="hash-mismatch"}"#, 1),
                (#"offline_server_report_saved_bytes_total{app="fleet"}"#, 1600),
                (#"offline_server_report_downloaded_bytes_total{app="fleet"}"#, 1400),
                (#"offline_server_report_offline_hit_ratio{app="fleet"}"#, 0.75),
            ]
            // Prometheus scrapes every second; the bound is on a scrape that never shows the
            // value, not a speed: a loaded full-suite run (load 15+) took longer than 30 s.
            for (query, value) in expected {
                let seen = try await prometheus.waitForValue(query, equal: value, within: .seconds(120))
                #expect(seen == value, "\(query)")
            }
        }
    }
}
