import ArgumentParser
import CommandSupport
import FoundationEssentials
import OfflineAgent

struct ResolveCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "resolve",
        abstract: "Print the file that serves URL offline; exit 1 with the reason when it is loaded from the network."
    )

    @Option(help: "The agent's root directory.") var root: String
    @Option(help: "The device id for rollout (the root's stable id when absent).") var deviceId: String?
    @Argument(help: "The URL a web view is about to load.") var url: String

    func run() async throws {
        try await reportingFailures {
            guard let target = URL(string: url), target.scheme != nil else {
                throw OfflineAgentError(.usage, "invalid URL '\(url)'")
            }
            switch try await Agent(root: try ExistingRoot.url(root)).resolve(target, deviceID: deviceId) {
            case .file(let file):
                print(file.path)
            case .network(let reason, let app):
                printError("offline-agent: not served offline: \(reason.rawValue)\(app.map { " (app \($0))" } ?? "")")
                throw ExitCode(1)
            }
        }
    }
}
