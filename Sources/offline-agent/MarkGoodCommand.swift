import ArgumentParser
import FoundationEssentials
import OfflineAgent

struct MarkGoodCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mark-good",
        abstract: "Confirm that the active version of an app works: it leaves its trial and stays.",
        discussion: """
            A page can confirm itself through serve: POST /.offline-agent/mark-good?app=NAME.
            Exit status: 0 confirmed; 1 no active version, or it is marked bad; 64 usage.
            """
    )

    @OptionGroup var target: AppTarget

    func run() async throws {
        try await reportingFailures {
            let version = try await target.agent().markGood(app: target.app)
            print("\(target.app): \(version) confirmed good")
        }
    }
}
