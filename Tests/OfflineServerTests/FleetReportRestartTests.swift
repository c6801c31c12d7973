import Foundation
import TestSupport
import Testing

/// Fleet reports survive a restart of the `offline-server` process: the same
/// `/stats` and fleet counters after it, and an id stored before is still a duplicate.
@Suite("Fleet reports: restart")
struct FleetReportRestartTests {
    typealias C = FleetReportClient

    @Test("stop and start on the same database: stats and counters the same, a resent id still a duplicate")
    func survivesRestart() async throws {
        let dir = try PublishFixtures.temporaryDirectory("fleet-restart")
        defer { PublishFixtures.cleanUp(dir) }
        try C.publishFleet(dir)
        let events = [
            C.event("updated", device: "d1", ["via": "patch", "bytes": 40, "fullSize": 400]),
            C.event("failed", device: "d2", ["errorCode": "patch-invalid", "bytes": 40]),
            C.event("usage", device: "d1", ["offlineHits": 30, "fallbacks": ["bad-version": 10]]),
        ]
        let body = try C.body(events)

        // The default database: DIR/.offline-server/reports.sqlite.
        let first = try OfflineServerProcess(arguments: ["--dir", dir])
        let stats: String, metrics: String
        do {
            #expect(try await C.post(first.baseURL, body).receipt?.accepted == 3)
            stats = try await C.statsText(first.baseURL)
            metrics = try await C.fleetMetricsText(first.baseURL)
        } catch {
            await first.stop()
            throw error
        }
        // The same arguments, so the same database, after a graceful stop.
        let second = try await first.restarted()
        #expect(first.process.terminationStatus == 0)
        #expect(FileManager.default.fileExists(atPath: dir + "/.offline-server/reports.sqlite"))
        #expect(metrics.contains("offline_server_report_saved_bytes_total{app=\"fleet\"} 360"))
        do {
            #expect(try await C.statsText(second.baseURL) == stats)
            #expect(try await C.fleetMetricsText(second.baseURL) == metrics)
            let again = try await C.post(second.baseURL, body)
            #expect(again.receipt?.accepted == 0)
            #expect(again.receipt?.duplicates == 3)
            #expect(try await C.statsText(second.baseURL) == stats)
            #expect(try await C.fleetMetricsText(second.baseURL) == metrics)
        } catch {
            await second.stop()
            throw error
        }
        await second.stop()

        // --no-reports: both routes 404, nothing created.
        let off = try PublishFixtures.temporaryDirectory("fleet-off")
        defer { PublishFixtures.cleanUp(off) }
        let third = try OfflineServerProcess(arguments: ["--dir", off, "--no-reports"])
        let refused = try await C.post(third.baseURL, body)
        await third.stop()
        #expect(refused.status == 404)
        #expect(!FileManager.default.fileExists(atPath: off + "/.offline-server"))
    }
}
