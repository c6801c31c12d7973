import Foundation
import OfflineAgent
import OfflineServer
import TestSupport
import Testing

/// `offline-server copy-reports`: a SQLite history moved to PostgreSQL reads the same, keeps
/// its receipt times and credential marks, and copying again copies nothing twice.
@Suite("Fleet reports: copy a SQLite history into PostgreSQL")
struct ReportCopyTests {
    typealias C = FleetReportClient

    static func psql(_ url: String, _ sql: String) async throws -> String {
        let text = try await CLI.run([url, "-qAtc", sql], executable: "/usr/bin/psql").stdout
        return text.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    @Test("copied history: /stats equal, receipt times and credential marks kept; a second copy adds nothing",
          .enabled(if: PostgresTestDatabase.isAvailable, "\(PostgresTestDatabase.server.skipReason ?? "")"))
    func copiesOnce() async throws {
        let dir = try PublishFixtures.temporaryDirectory("copy-reports")
        defer { PublishFixtures.cleanUp(dir) }
        try C.publishFleet(dir)
        let sqlite = dir + "/reports.sqlite"
        var configuration = ReferenceServer.Configuration(directory: dir, port: 0, reportsDatabase: sqlite)
        configuration.reportToken = ReportEnrolmentTests.token
        configuration.collectorSecret = dir + "/collector-secret"
        let bearer = ["Authorization: Bearer \(ReportEnrolmentTests.token)"]
        let server = try await ReferenceServer(configuration: configuration).start()
        let sqliteStats: String
        do {
            // Four batches: installs by patch and full, failures, a rollback, usage with fallbacks.
            let batches: [[[String: Any]]] = [
                (0..<6).map { C.event("updated", device: "d\($0)", version: "2.0.0", ["via": $0 % 2 == 0 ? "patch" : "full", "bytes": 10, "fullSize": 100]) },
                (6..<9).map { C.event("failed", device: "d\($0)", version: "2.1.0", ["errorCode": "network"]) },
                [C.event("rolled-back", device: "d1", version: "1.0.0", ["previousVersion": "2.0.0"])],
                [C.event("usage", device: "d2", ["offlineHits": 40, "fallbacks": ["missing-file": 3, "bad-version": 2]])],
            ]
            for batch in batches {
                #expect(try await C.post(server.baseURL, try C.body(batch), headers: bearer).receipt?.accepted == batch.count)
            }
            // One batch from a device's own credential.
            let authorization = try await ReportEnrolmentTests.enrol(server.baseURL, "d9")
            let own = [C.event("updated", device: "d9", version: "2.1.0", ["via": "full"])]
            #expect(try await C.post(server.baseURL, try C.body(own), headers: ["Authorization: \(authorization)"]).receipt?.accepted == 1)
            sqliteStats = try await C.statsText(server.baseURL)
        } catch {
            await server.stop()
            throw error
        }
        await server.stop()

        let database = try await PostgresTestDatabase("copyreports")
        defer { database.drop() }
        let executable = try #require(PublishFixtures.builtExecutable("offline-server"))
        let first = try await CLI.run(["copy-reports", "--from", sqlite, "--to", database.url], executable: executable)
        #expect(first.status == 0 && first.stdout == "copied 12, duplicates 0, refused 0, enrolled ids 1\n", "\(first.stdout) \(first.stderr)")
        let again = try await CLI.run(["copy-reports", "--from", sqlite, "--to", database.url], executable: executable)
        #expect(again.status == 0 && again.stdout == "copied 0, duplicates 12, refused 0, enrolled ids 0\n", "\(again.stdout) \(again.stderr)")
        // Five batches, five receipt times; the one credential-sent event still marked.
        #expect(try await Self.psql(database.url, "SELECT COUNT(DISTINCT receivedMillis), COUNT(*) FILTER (WHERE authenticated) FROM events") == "5|1")

        var onPostgres = ReferenceServer.Configuration(directory: dir, port: 0, reportsDatabase: database.url)
        onPostgres.reportToken = ReportEnrolmentTests.token
        onPostgres.collectorSecret = dir + "/collector-secret"
        let shared = try await ReferenceServer(configuration: onPostgres).start()
        do {
            #expect(try await C.statsText(shared.baseURL) == sqliteStats)
            // d9 enrolled on SQLite: still enrolled, its credential not handed out again.
            let asked = try await ReportEnrolmentTests.request(shared.baseURL + "/enrol", headers: bearer, body: Data(#"{"device":"d9"}"#.utf8))
            #expect(asked.status == 409, "\(asked.body)")
        } catch {
            await shared.stop()
            throw error
        }
        await shared.stop()
        // A missing source is named, not created.
        let missing = try await CLI.run(["copy-reports", "--from", dir + "/none.sqlite", "--to", database.url], executable: executable)
        #expect(missing.status == 64 && missing.stderr.contains("offline-server: usage: no such SQLite reports database (\(dir)/none.sqlite)\n"), "\(missing.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dir + "/none.sqlite"))
    }
}
