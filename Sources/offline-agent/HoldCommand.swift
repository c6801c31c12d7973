import ArgumentParser
import Foundation
import OfflineAgent

struct HoldCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "hold",
        abstract: "Keep the active version of an app: syncs report \"held\" and download nothing until unhold.",
        discussion: "Exit status: 0 held; 1 the app has no installed version; 64 usage."
    )

    @Option(help: "The agent's root directory.") var root: String
    @Option(help: "The app to hold.") var app: String

    func run() async throws {
        try await reportingFailures {
            let agent = Agent(root: try ExistingRoot.url(root))
            try await agent.hold(app: app)
            print("\(app): held at \(await agent.lifecycle(app: app).version?.description ?? "none")")
        }
    }
}
