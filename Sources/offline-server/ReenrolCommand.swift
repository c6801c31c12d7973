import ArgumentParser
import CommandSupport
import Foundation
import Logging
import OfflineServer

/// `offline-server reenrol --device ID (--database PATH|URL | --publish-dir DIR)`: lets an
/// enrolled device id enrol again (see `ReportEnrolment`). Its own option names: the
/// server's `--reports-db` and `--dir` are the parent command's, which would take them.
struct ReenrolCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "reenrol",
        abstract: "Let an enrolled device id enrol again (a device reset or replaced).",
        discussion: """
            Each device id enrols once: POST /enrol answers 409 for an id enrolled already, so \
            holding the fleet token does not get another device's credential. Run this for a \
            device that was reset or replaced, or lost its credential: its next enrolment \
            succeeds (and gets the same credential while the collector secret is the same). \
            Prints one line.
            """
    )

    @Option(help: "The device id (the agent's device id).") var device: String
    @Option(help: "The reports database (the server's --reports-db): a SQLite path or postgres://USER:PASSWORD@HOST:PORT/DB.")
    var database: String?
    @Option(help: "Instead of --database: the publish directory (the server's --dir) whose default SQLite database to use.")
    var publishDir: String?

    func run() async throws {
        CommandLogging.warningsOnly()
        let enrolled = try await reportingFailures(tool: "offline-server") {
            guard (database == nil) != (publishDir == nil) else { throw ServerError(.usage, "give --database or --publish-dir, one of them") }
            let location = database ?? ReportDatabaseLocation.defaultPath(directory: publishDir ?? "").path
            return try await ReportEnrolment.release(device: device, database: location, logger: Logger(label: "offline-server"))
        }
        print(enrolled ? "\(device) may enrol again" : "\(device) was not enrolled: it may enrol")
    }
}
