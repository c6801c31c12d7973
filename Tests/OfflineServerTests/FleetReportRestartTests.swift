import Foundation
import OfflineServer
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

        // The default database: under the state directory, outside the publish directory.
        let state = TemporaryDirectory("fleet-state")
        let first = try await OfflineServerProcess(arguments: ["--dir", dir, "--open-collector"], environment: ["XDG_STATE_HOME": state.path])
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
        let database = ReportDatabaseLocation.defaultPath(directory: dir, environment: ["XDG_STATE_HOME": state.path])
        #expect(database.warning == nil && database.path.hasPrefix(state.path + "/offline-server/"))
        #expect(FileManager.default.fileExists(atPath: database.path))
        #expect(!FileManager.default.fileExists(atPath: dir + "/.offline-server"), "nothing of the reports in what a static host serves")
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
        let third = try await OfflineServerProcess(arguments: ["--dir", off, "--no-reports"])
        let refused = try await C.post(third.baseURL, body)
        await third.stop()
        #expect(refused.status == 404)
        #expect(!FileManager.default.fileExists(atPath: off + "/.offline-server"))
    }

    /// A publish directory whose database, holding one event, is in the old default
    /// place inside it (as servers before that rule made it); the directory and that path.
    static func legacyDatabase(_ label: String) async throws -> (dir: String, database: String) {
        let dir = try PublishFixtures.temporaryDirectory(label)
        try C.publishFleet(dir)
        let legacy = dir + "/.offline-server/reports.sqlite"
        let before = try await OfflineServerProcess(arguments: ["--dir", dir, "--open-collector", "--reports-db", legacy])
        #expect(try await C.post(before.baseURL, try C.body([C.event("updated", ["via": "full"])])).receipt?.accepted == 1)
        await before.stop()
        return (dir, legacy)
    }

    @Test("a database in the old default place, inside the publish directory, keeps being used (with a warning)")
    func oldDefaultPlace() async throws {
        let (dir, legacy) = try await Self.legacyDatabase("fleet-legacy")
        defer { PublishFixtures.cleanUp(dir) }
        let state = TemporaryDirectory("fleet-legacy-state")
        let location = ReportDatabaseLocation.defaultPath(directory: dir, environment: ["XDG_STATE_HOME": state.path])
        #expect(location.path == legacy && location.warning?.contains("--reports-db") == true)
        let after = try await OfflineServerProcess(arguments: ["--dir", dir, "--open-collector"], environment: ["XDG_STATE_HOME": state.path])
        defer { after.stopInBackground() }
        #expect(try await C.stats(after.baseURL)["events"] as? Int == 1, "the history stays")
        #expect(!FileManager.default.fileExists(atPath: state.path + "/offline-server"))
    }

    @Test("--reports-db as a URL of another kind (sqlite://, mysql://, postgres:/ with one slash) stops the start with one usage error naming the scheme, not its password; nothing is created")
    func otherSchemesRefused() async throws {
        let dir = try PublishFixtures.temporaryDirectory("fleet-scheme")
        defer { PublishFixtures.cleanUp(dir) }
        try C.publishFleet(dir)
        for url in ["sqlite://\(dir)/reports.sqlite", "mysql://u:pw-secret@db.internal/x", "postgres:/u:pw-secret@db.internal/x", "File://\(dir)/x"] {
            let scheme = String(url.prefix { $0 != ":" })
            // Read as a path, each would be a directory named after its scheme in the working directory.
            let stray = FileManager.default.currentDirectoryPath + "/" + scheme + ":"
            defer { try? FileManager.default.removeItem(atPath: stray) }
            do {
                let server = try await ReferenceServer(configuration: .init(directory: dir, port: 0, reportsDatabase: url)).start()
                await server.stop()
                Issue.record("\(url): started")
            } catch let error as ServerError {
                #expect(error.code == .usage && "\(error)".contains("\(scheme):") && !"\(error)".contains("pw-secret"), "\(error)")
            }
            #expect(!FileManager.default.fileExists(atPath: stray), "\(url) made \(stray)")
        }
    }

    @Test("the collector secret is never created inside the publish directory by default: beside a database in the old place, or on PostgreSQL, it goes to the state directory")
    func secretOutsidePublishDirectory() async throws {
        let (dir, _) = try await Self.legacyDatabase("fleet-legacy-secret")
        defer { PublishFixtures.cleanUp(dir) }
        let state = TemporaryDirectory("fleet-legacy-secret-state")
        let postgres = PostgresTestDatabase.isAvailable ? try await PostgresTestDatabase("legacysecret") : nil
        defer { postgres?.drop() }
        // The old place's database, then PostgreSQL while that database is still there.
        var runs: [[String]] = [[]]
        if let postgres { runs.append(["--reports-db", postgres.url]) }
        for database in runs {
            let server = try await OfflineServerProcess(
                arguments: ["--dir", dir, "--report-token", ReportEnrolmentTests.token] + database, environment: ["XDG_STATE_HOME": state.path])
            defer { server.stopInBackground() }
            let device = "kiosk-\(database.count)"
            let authorization = try await ReportEnrolmentTests.enrol(server.baseURL, device)
            let sent = try await C.post(server.baseURL, try C.body([C.event("updated", device: device, ["via": "full"])]), headers: ["Authorization: \(authorization)"])
            #expect(sent.receipt?.accepted == 1, "\(database): \(sent.body)")
            #expect(!FileManager.default.fileExists(atPath: dir + "/.offline-server/collector-secret"), "\(database): the secret is in the publish directory")
        }
        let kept = try FileManager.default.subpathsOfDirectory(atPath: state.path).filter { $0.hasSuffix("/collector-secret") }
        #expect(kept.count == 1, "\(kept)")
    }
}
