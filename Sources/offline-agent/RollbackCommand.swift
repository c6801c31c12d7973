import ArgumentParser
import Foundation
import OfflineAgent

struct RollbackCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rollback",
        abstract: "Make the previously installed version of an app active again."
    )

    @Option(help: "The agent's root directory.") var root: String
    @Option(help: "The app to roll back.") var app: String

    func run() async throws {
        try await reportingFailures {
            let (from, to) = try await Agent(root: URL(fileURLWithPath: root)).rollback(app: app)
            print("\(app): rolled back \(from) -> \(to)")
        }
    }
}
