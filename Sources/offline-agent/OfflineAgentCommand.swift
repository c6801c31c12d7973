import ArgumentParser
import CommandSupport
import FoundationEssentials
import OfflineAgent
#if canImport(Glibc)
import Glibc
#endif

@main
struct OfflineAgentCommand: AsyncParsableCommand {
    static let commandName = "offline-agent"

    static let configuration = CommandConfiguration(
        commandName: commandName,
        abstract: "Keeps offline H5 packages current and serves them.",
        discussion: """
            The wire contract (manifests, signatures, whitelist rules, error codes) is docs/PROTOCOL.md \
            in the offline-agent repository; docs/CLI.md documents every command. Packages are published \
            with offline-publish (docs/PUBLISHING.md).
            """,
        version: AgentVersion.current,
        subcommands: [
            SyncCommand.self, StatusCommand.self, ResolveCommand.self, RollbackCommand.self,
            PatchCommand.self, ExtractCommand.self, ServeCommand.self,
            CookiesCommand.self, SessionURLCommand.self, CheckConfigCommand.self,
            MarkGoodCommand.self, MarkBadCommand.self, HoldCommand.self, UnholdCommand.self, HistoryCommand.self,
            ForgetBadCommand.self,
        ]
    )

    /// `sync` is parsed on its own first. cron and systemd run it every minute and nearly
    /// every run is a throttled no-op, so start-up is most of its cost: parsing against
    /// the root command builds every subcommand's argument table by reflection (runtime
    /// conformance lookups over the whole binary) before reading one flag. Parsed alone, a
    /// throttled no-op stays within its 5 ms (a median of about 4 ms on the shipped build,
    /// docs/PERFORMANCE.md), so `sync` has no second, hand-written parser to keep in step.
    /// Whatever `sync` alone does not parse (help, a usage error, completion scripts,
    /// another command) goes through the full parser, so help and errors read exactly as before.
    static func main() async {
        // libzip converts every header's DOS date with mktime(). With TZ unset, glibc stats
        // /etc/localtime at each call, under a lock every thread shares: six calls an entry,
        // and the extraction workers queued on that lock. The same zone, named, is read once.
        if getenv("TZ") == nil { setenv("TZ", ":/etc/localtime", 0) }
        DryParse.exitIfAsked(Self.self)
        let arguments = Array(CommandLine.arguments.dropFirst())
        if arguments.first == SyncCommand.configuration.commandName,
           let sync = try? SyncCommand.parse(Array(arguments.dropFirst())) {
            do {
                try await sync.run()
            } catch {
                exit(withError: error)
            }
            return
        }
        // A first word that names no command is a usage error whatever follows: without
        // this, `offline-agent publish --version` printed the version and exited 0, as if
        // the agent had a `publish` command.
        if let first = arguments.first, !first.hasPrefix("-"), first != "help",
           !configuration.subcommands.contains(where: { $0.configuration.commandName == first }) {
            let names = configuration.subcommands.compactMap { $0.configuration.commandName }.joined(separator: ", ")
            printError("offline-agent: usage: unknown command '\(first)' (commands: \(names); see offline-agent --help)")
            exit(withError: ExitCode(64))
        }
        await main(nil)
    }
}

/// Runs a command body, reporting an engine error as one line on stderr and its exit status.
@discardableResult
func reportingFailures<T>(_ body: () async throws -> T) async throws -> T {
    try await CommandSupport.reportingFailures(tool: "offline-agent", body)
}
