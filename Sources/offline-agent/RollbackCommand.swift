import ArgumentParser
import FoundationEssentials
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

    @OptionGroup var target: AppTarget

    func run() async throws {
        try await reportingFailures {
            let (from, to) = try await target.agent().rollback(app: target.app)
            print("\(target.app): rolled back \(from) -> \(to); \(from) marked bad")
        }
    }
}
