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
        subcommands: [PublishCommand.self, KeygenCommand.self, StageCommand.self, SetCommand.self, RevertCommand.self, PromoteCommand.self, HistoryCommand.self, TimestampCommand.self, RootCommand.self, DelegateCommand.self, HaltCommand.self]
    )

    /// A first word that names no command is a usage error whatever follows, so
    /// `offline-publish sync --version` does not print the version and exit 0.
    static func main() async {
        DryParse.exitIfAsked(Self.self)
        let arguments = Array(CommandLine.arguments.dropFirst())
        if let first = arguments.first, !first.hasPrefix("-"), first != "help",
           !configuration.subcommands.contains(where: { $0.configuration.commandName == first }) {
            let names = configuration.subcommands.compactMap { $0.configuration.commandName }.joined(separator: ", ")
            printError("offline-publish: usage: unknown command '\(first)' (commands: \(names); see offline-publish --help)")
            exit(withError: ExitCode(64))
        }
        await main(nil)
    }
}

/// Runs a command body, reporting an engine error as one line on stderr and its exit status.
@discardableResult
func reportingFailures<T>(_ body: () async throws -> T) async throws -> T {
    try await CommandSupport.reportingFailures(tool: "offline-publish", body)
}
