import ArgumentParser
import CommandSupport
import FoundationEssentials
import OfflineAgent

@main
struct OfflineAgentCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "offline-agent",
        abstract: "Keeps offline H5 packages current and serves them.",
        discussion: """
            The wire contract (manifests, signatures, whitelist rules, error codes) is docs/PROTOCOL.md \
            in the offline-agent repository; README.md documents every command. Packages are published \
            with offline-publish (docs/PUBLISHING.md).
            """,
        version: AgentVersion.current,
        subcommands: [
            SyncCommand.self, StatusCommand.self, ResolveCommand.self, RollbackCommand.self,
            PatchCommand.self, ExtractCommand.self, ServeCommand.self,
            CookiesCommand.self, SessionURLCommand.self, CheckConfigCommand.self,
            MarkGoodCommand.self, MarkBadCommand.self, HoldCommand.self, UnholdCommand.self, HistoryCommand.self,
        ]
    )
}

/// Runs a command body, reporting an engine error as one line on stderr and its exit status.
@discardableResult
func reportingFailures<T>(_ body: () async throws -> T) async throws -> T {
    try await CommandSupport.reportingFailures(tool: "offline-agent", body)
}
