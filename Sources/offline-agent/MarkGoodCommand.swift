import ArgumentParser
import Foundation
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

    @Option(help: "The agent's root directory.") var root: String
    @Option(help: "The app whose active version works.") var app: String

    func run() async throws {
        try await reportingFailures {
            let version = try await Agent(root: try ExistingRoot.url(root)).markGood(app: app)
            print("\(app): \(version) confirmed good")
        }
    }
}
