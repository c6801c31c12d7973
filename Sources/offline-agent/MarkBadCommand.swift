import ArgumentParser
import FoundationEssentials
import OfflineAgent

struct MarkBadCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mark-bad",
        abstract: "Report that the active version of an app does not work: roll back and never install it again.",
        discussion: """
            The previous good version becomes active at once; with none, nothing of the app is \
            served offline (resolve and serve answer "network"). While a sync runs, the version \
            is marked bad at once and the switch completes at the next launch or sync.
            With --version, only that version is marked, and only while it is the active one:             otherwise nothing changes. A page reports itself from its mirror origin through serve:             POST /.offline-agent/mark-bad?app=NAME&version=V.
            Exit status: 0 marked bad; 1 no active version, it already is bad, or --version is not             the active version; 64 usage.
            """
    )

    @OptionGroup var target: AppTarget
    @Option(help: "Why, for the history.") var reason: String = "reported failing"
    @Option(help: "Mark only this version, and only while it is the active one.") var version: String?

    func run() async throws {
        try await reportingFailures {
            let agent = try target.agent()
            let transition = if let wanted = try MarkGoodCommand.parse(version) {
                try await agent.markBad(app: target.app, version: wanted, reason: reason)
            } else {
                try await agent.markBad(app: target.app, reason: reason)
            }
            print(Self.line(transition))
        }
    }

    static func line(_ transition: LifecycleTransition) -> String {
        let target = transition.to.map { "\($0) is active" } ?? "nothing is served offline (network)"
        let pending = transition.switched ? "" : " once the running sync ends"
        return "\(transition.app): \(transition.from) marked bad; \(target)\(pending)"
    }
}
