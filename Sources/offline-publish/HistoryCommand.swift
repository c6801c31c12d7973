import ArgumentParser
import Foundation
import OfflineAgent
import OfflinePublish

struct HistoryCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "history",
        abstract: "List an app's published versions and the revisions of its live release."
    )

    @Option(help: "The app name.") var app: String
    @Option(help: "The publish directory.") var out: String
    @Flag(help: "Print one JSON object.") var json = false

    func run() async throws {
        try await reportingFailures {
            let history = try ReleaseEditor.history(app: app, publishDirectory: out)
            print(json ? try history.json() : history.text)
            MetadataExpiryWarning.check(publishDirectory: out)
        }
    }
}
