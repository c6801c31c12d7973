import ArgumentParser
import CommandSupport
import Foundation
import Logging
import OfflineServer

/// `offline-server copy-reports --from PATH --to postgres://…`: a SQLite report history
/// into PostgreSQL (see `ReportCopy`).
struct CopyReportsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "copy-reports",
        abstract: "Copy a SQLite report history into PostgreSQL (idempotent: ids already there are skipped).",
        discussion: """
            Copies every stored event, with its receipt time, in the order it was stored, so /stats, \
            the dashboard and --auto-halt read the same history from PostgreSQL. Run it again at \
            any time: events already copied count as duplicates. Prints one line: copied, \
            duplicates, refused (events an older server stored that today's rules refuse), \
            enrolled ids (recorded now: an id enrolled on SQLite stays enrolled).
            """
    )

    @Option(help: "The SQLite reports database to read (not changed, apart from migrating it as a server start would).")
    var from: String
    @Option(help: "postgres://USER:PASSWORD@HOST:PORT/DB to copy into (add ?sslmode=require for TLS).")
    var to: String

    func run() async throws {
        CommandLogging.warningsOnly()
        let result = try await reportingFailures(tool: "offline-server") {
            try await ReportCopy.copy(from: from, to: to, logger: Logger(label: "offline-server"))
        }
        print("copied \(result.copied), duplicates \(result.duplicates), refused \(result.refused), enrolled ids \(result.enrolled)")
    }
}
