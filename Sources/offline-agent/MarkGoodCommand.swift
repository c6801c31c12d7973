import ArgumentParser
import FoundationEssentials
import OfflineAgent

struct MarkGoodCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mark-good",
        abstract: "Confirm that the active version of an app works: it leaves its trial and stays.",
        discussion: """
            With --version, only that version is confirmed, and only while it is the active one             (a sync may have swapped another in since the host ran it): otherwise nothing changes.             A page confirms itself from its mirror origin through serve:             POST /.offline-agent/mark-good?app=NAME&version=V.
            Exit status: 0 confirmed; 1 no active version, it is marked bad, or --version is not             the active version; 64 usage.
            """
    )

    @OptionGroup var target: AppTarget
    @Option(help: "Confirm only this version, and only while it is the active one.") var version: String?

    func run() async throws {
        try await reportingFailures {
            let agent = try target.agent()
            let version = if let wanted = try Self.parse(version) {
                try await agent.markGood(app: target.app, version: wanted)
            } else {
                try await agent.markGood(app: target.app)
            }
            print("\(target.app): \(version) confirmed good")
        }
    }

    /// `--version`, parsed (a usage error names the format).
    static func parse(_ text: String?) throws -> Version? {
        guard let text else { return nil }
        guard let version = Version(text) else { throw OfflineAgentError(.usage, "invalid version '\(text)': \(Version.format)") }
        return version
    }
}
