import ArgumentParser
import Foundation
import OfflineAgent

@main
struct OfflineAgentCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "offline-agent",
        abstract: "Keeps offline H5 packages current and serves them.",
        version: AgentVersion.current,
        subcommands: [
            SyncCommand.self, StatusCommand.self, ResolveCommand.self, RollbackCommand.self,
            PatchCommand.self, ExtractCommand.self, ServeCommand.self, PublishCommand.self, KeygenCommand.self,
            CookiesCommand.self, SessionURLCommand.self, CheckConfigCommand.self,
            MarkGoodCommand.self, MarkBadCommand.self, HoldCommand.self, UnholdCommand.self, HistoryCommand.self,
        ]
    )
}

/// Runs a command body, turning engine errors into a one-line reason on stderr and
/// the exit status of their code (1 failed, 64 usage, 75 busy) — never a trap.
@discardableResult
func reportingFailures<T>(_ body: () async throws -> T) async throws -> T {
    do {
        return try await body()
    } catch let error as OfflineAgentError {
        printError("offline-agent: \(error)")
        throw ExitCode(error.exitStatus)
    }
}

func printError(_ line: String) {
    FileHandle.standardError.write(Data((line + "\n").utf8))
}
