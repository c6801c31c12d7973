import ArgumentParser
import FoundationEssentials
import OfflineAgent

struct HoldCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "hold",
        abstract: "Keep the active version of an app: syncs report \"held\" and download nothing until unhold.",
        discussion: "Exit status: 0 held; 1 the app has no installed version; 64 usage."
    )

    @OptionGroup var target: AppTarget

    func run() async throws {
        try await reportingFailures {
            let agent = try target.agent()
            try await agent.hold(app: target.app)
            print("\(target.app): held at \(await agent.lifecycle(app: target.app).version?.description ?? "none")")
        }
    }
}
