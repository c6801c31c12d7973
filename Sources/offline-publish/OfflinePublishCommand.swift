import ArgumentParser
import CommandSupport
import OfflineAgent
import OfflinePublish

/// `offline-publish`: the operator's toolkit. Packages builds as signed versions with patches,
/// in a directory any static host can serve. Nothing here ships to devices.
@main
struct OfflinePublishCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "offline-publish",
        abstract: "Publish offline H5 packages: versions, patches and signed manifests for any static host.",
        discussion: """
            The wire format is docs/PROTOCOL.md in the offline-agent repository; docs/PUBLISHING.md walks \
            through keygen, publish, uploading to a static host and configuring devices.
            """,
        version: AgentVersion.current,
        subcommands: [PublishCommand.self, KeygenCommand.self, StageCommand.self, SetCommand.self, RevertCommand.self, PromoteCommand.self, HistoryCommand.self]
    )
}

/// Runs a command body, reporting an engine error as one line on stderr and its exit status.
@discardableResult
func reportingFailures<T>(_ body: () async throws -> T) async throws -> T {
    try await CommandSupport.reportingFailures(tool: "offline-publish", body)
}
