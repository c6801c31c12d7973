import Foundation
import OfflineAgent
import OfflinePublish
import OfflineServer
import TestSupport
import Testing

/// What the fleet report tests share: events as a device sends them, `POST /report`
/// through a real `curl` process, `/stats` and `/metrics` read back.
enum FleetReportClient {
    /// The reason (or receipt) and status of one `POST /report`.
    struct Answer {
        var status: Int
        var body: String
        var receipt: (accepted: Int, duplicates: Int)? {
            guard status == 200, let object = try? JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any],
                  let accepted = object["accepted"] as? Int, let duplicates = object["duplicates"] as? Int else { return nil }
            return (accepted, duplicates)
        }
    }

    /// A valid event: 32 lowercase hex id, as the agent sends; `fields` override or add keys.
    static func event(
        _ kind: String, app: String = "fleet", device: String = "device-1", version: String? = "2.0.0",
        _ fields: [String: Any] = [:]
    ) -> [String: Any] {
        var event: [String: Any] = [
            "id": newID(), "time": "2026-11-22T21:30:00Z", "device": device, "app": app, "event": kind,
            "bytes": 0, "durationMs": 12,
        ]
        if let version { event["version"] = version }
        if kind == "usage" {
            event["offlineHits"] = 0
            event["periodSeconds"] = 3600
        }
        for (key, value) in fields { event[key] = value }
        return event
    }

    static func newID() -> String {
        UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
    }

    static func body(_ events: [[String: Any]]) throws -> Data {
        try JSONSerialization.data(withJSONObject: ["events": events], options: [.sortedKeys])
    }

    /// `POST /report` with curl (a process, as a device or a fleet script would send it).
    static func post(_ base: String, _ body: Data, headers: [String] = []) async throws -> Answer {
        let file = NSTemporaryDirectory() + "report-\(UUID().uuidString).json"
        try body.write(to: URL(fileURLWithPath: file))
        defer { try? FileManager.default.removeItem(atPath: file) }
        return try await post(base, file: file, headers: headers)
    }

    static func post(_ base: String, file: String, headers: [String] = []) async throws -> Answer {
        // A bound on a hung server, not a speed: a loaded CI machine can take seconds per request.
        var arguments = ["-sS", "--max-time", "120", "-X", "POST", "-H", "Content-Type: application/json"]
        for header in headers { arguments += ["-H", header] }
        arguments += ["--data-binary", "@" + file, "-w", "\n%{http_code}", base + "/report"]
        let result = try await CLI.run(arguments, executable: "/usr/bin/curl")
        #expect(result.status == 0, "curl: \(result.stderr)")
        var lines = result.stdout.split(separator: "\n", omittingEmptySubsequences: false)
        let status = Int(lines.popLast() ?? "") ?? 0
        return Answer(status: status, body: lines.joined(separator: "\n"))
    }

    /// The collector's answers read back (`FleetStats`), for app `fleet` unless named.
    static func stats(_ base: String, app: String = "fleet") async throws -> [String: Any] { try await FleetStats.stats(base, app: app) }
    static func statsText(_ base: String, app: String = "fleet") async throws -> String { try await FleetStats.statsText(base, app: app) }
    static func version(_ stats: [String: Any], _ version: String) -> [String: Any]? { FleetStats.version(stats, version) }
    static func metrics(_ base: String) async throws -> PrometheusExposition { try await FleetStats.metrics(base) }
    static func fleetMetricsText(_ base: String) async throws -> String { try await FleetStats.fleetMetricsText(base) }

    /// Publishes app `fleet` into `directory` as versions 1.0.0, 2.0.0 and 2.1.0 (the sample
    /// app's first three): only apps and versions of the publish directory get series of
    /// their own in `/metrics`, so the reports the tests send name these.
    static func publishFleet(_ directory: String, versions: [String] = ["1.0.0", "2.0.0", "2.1.0"]) throws {
        for (index, version) in versions.enumerated() {
            var options = PublishOptions(
                app: "fleet", version: Version(version)!, sourceDirectory: PublishFixtures.sampleApp(PublishFixtures.sampleVersions[index]),
                publishDirectory: directory, whitelist: ["https://h5.example.com/fleet/"])
            options.now = PublishFixtures.fixedPublishTime
            _ = try Publisher.publish(options)
        }
    }

    /// An in-process server over a publish directory holding app `fleet` (`publishFleet`)
    /// with reports in `database`; stopped after `body`.
    static func withServer(
        database: String, _ body: (RunningReferenceServer) async throws -> Void
    ) async throws {
        let directory = try PublishFixtures.temporaryDirectory("fleet-dir")
        defer { PublishFixtures.cleanUp(directory) }
        try publishFleet(directory)
        let server = try await ReferenceServer(
            configuration: .init(directory: directory, port: 0, reportsDatabase: database)).start()
        do {
            try await body(server)
        } catch {
            await server.stop()
            throw error
        }
        await server.stop()
    }
}
