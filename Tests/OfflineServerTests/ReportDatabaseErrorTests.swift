import Foundation
import TestSupport
import Testing

/// Row 9 of issue 38, as a careless operator meets it: a `--reports-db` that cannot work
/// stops the start with one line naming the cause (exit 64 when the value itself is
/// wrong), never a wrapped port, a bare `serverClosedConnection`, an ignored parameter or
/// a cause printed twice.
@Suite("Fleet reports: a reports database that cannot be used is one clear line")
struct ReportDatabaseErrorTests {
    @Test("bad URLs and paths: port out of range, refused, silent or unresolvable host, unknown parameter, empty path, a file that is not a database")
    func oneLineEach() async throws {
        let dir = try PublishFixtures.temporaryDirectory("reports-db-errors")
        defer { PublishFixtures.cleanUp(dir) }
        try FleetReportClient.publishFleet(dir)
        let executable = try #require(PublishFixtures.builtExecutable("offline-server"))
        let silent = try LoopbackListener.silent()
        defer { silent.stop() }
        let refused = try TrickleServer.deadPort()
        let notDatabase = dir + "/not-a-database"
        try Data("not SQLite".utf8).write(to: URL(fileURLWithPath: notDatabase))
        let cases: [(database: String, status: Int32, says: String)] = [
            ("postgres://u@127.0.0.1:99999/db", 64, "port 99999 is outside 1…65535"),
            ("postgres://u@127.0.0.1:\(refused)/db", 1, "cannot connect to 127.0.0.1:\(refused): Connection refused"),
            ("postgres://u@127.0.0.1:\(silent.port)/db?connect_timeout=1", 1,
             "cannot connect to 127.0.0.1:\(silent.port): no answer within 1 s (connect_timeout)"),
            ("postgres://u@no-such-host.invalid/db", 1, "cannot connect to no-such-host.invalid:5432: the host name does not resolve"),
            ("postgres://u@127.0.0.1/db?connect_timeout=1&application_nam=x", 64, "unknown parameter 'application_nam'"),
            ("postgres://u@127.0.0.1/db?connect_timeout=0", 64, "connect_timeout must be whole seconds, 1 to 600"),
            ("", 64, "--reports-db is empty"),
            (notDatabase, 1, "cannot open the reports database (\(notDatabase)): SQLite error 26: file is not a database"),
        ]
        for (database, status, says) in cases {
            let result = try await CLI.run(
                ["--dir", dir, "--port", "0", "--open-collector", "--reports-db", database], executable: executable)
            let lines = result.stderr.split(separator: "\n")
            #expect(result.status == status, "\(database): \(result.status) \(result.stderr)")
            #expect(lines.count == 1 && lines.first?.contains(says) == true, "\(database): \(result.stderr)")
            // The cause once: no line repeats a part of itself.
            #expect(result.stderr.components(separatedBy: "SQLite error").count <= 2, "\(result.stderr)")
        }
    }
}
