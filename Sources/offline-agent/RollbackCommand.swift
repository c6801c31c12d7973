import ArgumentParser
import Foundation
import OfflineAgent

struct RollbackCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rollback",
        abstract: "Make the previously installed version of an app active again, and mark the one it leaves bad.",
        discussion: """
            The version left is never installed again by a sync (see mark-bad, history).
            Exit status: 0 rolled back; 1 no previous version is kept (or it is bad); 64 usage; \
            75 a sync holds the root's lock.
            """
    )

    @Option(help: "The agent's root directory.") var root: String
    @Option(help: "The app to roll back.") var app: String

    func run() async throws {
        try await reportingFailures {
            let (from, to) = try await Agent(root: try ExistingRoot.url(root)).rollback(app: app)
            print("\(app): rolled back \(from) -> \(to); \(from) marked bad")
        }
    }
}
