import ArgumentParser
import FoundationEssentials
import OfflineAgent

struct HistoryCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "history",
        abstract: "Show an app's version transitions: time, event, from, to, why (the last 100).",
        discussion: "Exit status: 0; 64 usage."
    )

    @OptionGroup var target: AppTarget
    @Flag(help: "Print {\"app\": …, \"history\": [{\"at\", \"event\", \"from\", \"to\", \"reason\"}, …]}.") var json = false

    func run() async throws {
        try await reportingFailures {
            guard AppName.isValid(target.app) else { throw OfflineAgentError(.usage, "invalid app name '\(target.app)'") }
            let status = try await target.agent().lifecycle(app: target.app)
            if json {
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
                let object = HistoryJSON(app: target.app, history: status.history.map(LifecycleEventJSON.init))
                print(String(decoding: try encoder.encode(object), as: UTF8.self))
                return
            }
            if status.history.isEmpty { print("\(target.app): no transitions recorded") }
            for event in status.history {
                let from = event.from?.description ?? "none", to = event.to?.description ?? "none"
                print("\(RFC3339.string(from: event.at)) \(event.event.rawValue) \(from) -> \(to): \(event.reason)")
            }
        }
    }

    private struct HistoryJSON: Encodable {
        var app: String
        var history: [LifecycleEventJSON]
    }
}
