import ArgumentParser
import FoundationEssentials
import OfflineAgent

struct UnholdCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "unhold",
        abstract: "Let syncs update an app again after hold.",
        discussion: "Exit status: 0 released; 1 the app has no installed version; 64 usage."
    )

    @OptionGroup var target: AppTarget

    func run() async throws {
        try await reportingFailures {
            try await target.agent().unhold(app: target.app)
            print("\(target.app): not held")
        }
    }
}
