import Foundation
import TestSupport
import Testing

/// A fleet at once: 100 devices, each a `curl` process of its own posting its events
/// concurrently; then `/stats` and `/metrics` add up exactly.
@Suite("Fleet reports: 100 devices")
struct FleetReportFleetTests {
    typealias C = FleetReportClient

    /// Device `i`'s events: an update to 2.0.0 (a patch for two devices in three), a failed
    /// 2.1.0 for every fifth, and a usage report.
    static func events(device i: Int) -> [[String: Any]] {
        let device = "device-\(String(format: "%03d", i))"
        var events = [
            C.event("updated", device: device, version: "2.0.0", [
                "via": i % 3 == 0 ? "full" : "patch", "bytes": i % 3 == 0 ? 1000 : 100 + i, "fullSize": 1000,
                "previousVersion": "1.0.0",
            ]),
            C.event("usage", device: device, version: "2.0.0", ["offlineHits": i, "fallbacks": ["missing-file": 1]]),
        ]
        if i % 5 == 0 {
            events.append(C.event("failed", device: device, version: "2.1.0", [
                "errorCode": i % 10 == 0 ? "hash-mismatch" : "network", "bytes": i, "previousVersion": "2.0.0",
            ]))
        }
        return events
    }

    @Test("100 concurrent device processes report; /stats and /metrics add up exactly")
    func hundredDevices() async throws {
        let dir = try PublishFixtures.temporaryDirectory("fleet-100")
        defer { PublishFixtures.cleanUp(dir) }
        let devices = 0..<100
        var files: [String] = []
        for i in devices {
            let file = "\(dir)/device-\(i).json"
            try C.body(Self.events(device: i)).write(to: URL(fileURLWithPath: file))
            files.append(file)
        }
        // What the fleet sent, added up here independently of the server.
        let patched = devices.filter { $0 % 3 != 0 }, full = devices.filter { $0 % 3 == 0 }, failing = devices.filter { $0 % 5 == 0 }
        let downloaded = patched.reduce(0) { $0 + 100 + $1 } + full.count * 1000 + failing.reduce(0, +)
        let saved = patched.reduce(0) { $0 + 1000 - (100 + $1) }
        let hits = devices.reduce(0, +)
        let hashMismatches = devices.filter { $0 % 10 == 0 }.count

        try await C.withServer(database: dir + "/reports.sqlite") { server in
            let url = server.baseURL + "/report", files = files
            let answers = try await LocalHTTP.onThread {
                // All 100 started before any is waited for: they post concurrently.
                let processes = try files.map { file in
                    let process = ChildProcess()
                    process.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
                    process.arguments = [
                        "-sS", "--max-time", "120", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST",
                        "-H", "Content-Type: application/json", "--data-binary", "@" + file, url,
                    ]
                    let out = Pipe()
                    process.standardOutput = out
                    try process.run()
                    return (process, out)
                }
                return processes.map { process, out in
                    let status = String(decoding: out.fileHandleForReading.readAllRetryingInterrupts(), as: UTF8.self)
                    process.waitUntilExit()
                    return process.terminationStatus == 0 ? status : "curl exit \(process.terminationStatus)"
                }
            }
            #expect(answers == Array(repeating: "200", count: 100))

            let stats = try await C.stats(server.baseURL)
            #expect(stats["events"] as? Int == 200 + failing.count)
            #expect(stats["devices"] as? Int == 100)
            #expect(stats["bytesDownloaded"] as? Int == downloaded)
            #expect(stats["bytesSaved"] as? Int == saved)
            #expect(stats["offlineHits"] as? Int == hits)
            #expect(stats["fallbacks"] as? [String: Int] == ["missing-file": 100])
            #expect(stats["offlineHitRatio"] as? Double == Double(hits) / Double(hits + 100))
            let v2 = try #require(C.version(stats, "2.0.0"))
            #expect(v2["devices"] as? Int == 100)
            #expect(v2["updated"] as? Int == 100)
            #expect(v2["failed"] as? Int == 0)
            #expect(v2["successRate"] as? Double == 1)
            let v21 = try #require(C.version(stats, "2.1.0"))
            #expect(v21["devices"] as? Int == 0)
            #expect(v21["failed"] as? Int == failing.count)
            #expect(v21["successRate"] as? Double == 0)
            let top = v21["topFailures"] as? [[String: Any]]
            #expect(top?.map { $0["errorCode"] as? String } == ["hash-mismatch", "network"])
            #expect(top?.map { $0["count"] as? Int } == [hashMismatches, failing.count - hashMismatches])

            let metrics = try await C.metrics(server.baseURL)
            let app = ["app": "fleet"]
            #expect(metrics.value("offline_server_report_updates_total", ["app": "fleet", "version": "2.0.0", "via": "patch"]) == Double(patched.count))
            #expect(metrics.value("offline_server_report_updates_total", ["app": "fleet", "version": "2.0.0", "via": "full"]) == Double(full.count))
            #expect(metrics.value("offline_server_report_failures_total", ["app": "fleet", "cause": "hash-mismatch"]) == Double(hashMismatches))
            #expect(metrics.value("offline_server_report_failures_total", ["app": "fleet", "cause": "network"]) == Double(failing.count - hashMismatches))
            #expect(metrics.value("offline_server_report_downloaded_bytes_total", app) == Double(downloaded))
            #expect(metrics.value("offline_server_report_saved_bytes_total", app) == Double(saved))
            #expect(metrics.value("offline_server_report_offline_hits_total", app) == Double(hits))
            #expect(metrics.value("offline_server_report_fallbacks_total", ["app": "fleet", "reason": "missing-file"]) == 100)
            #expect(metrics.value("offline_server_report_events_total", ["app": "fleet", "event": "usage"]) == 100)
        }
    }
}
