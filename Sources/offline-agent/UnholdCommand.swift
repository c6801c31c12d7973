import ArgumentParser
import Foundation
import OfflineAgent

struct UnholdCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "unhold",
        abstract: "Let syncs update an app again after hold.",
        discussion: "Exit status: 0 released; 1 the app has no installed version; 64 usage."
    )

    @Option(help: "The agent's root directory.") var root: String
    @Option(help: "The app to release.") var app: String

    func run() async throws {
        try await reportingFailures {
            try await Agent(root: try ExistingRoot.url(root)).unhold(app: app)
            print("\(app): not held")
        }
    }
}
