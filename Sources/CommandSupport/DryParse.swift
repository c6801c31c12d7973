import ArgumentParser
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// `OFFLINE_DRY_PARSE=1 offline-… ARGS`: parse `ARGS` as the tool would (subcommand,
/// options, `validate()`), then exit 0, or 64 with the usage error, without running
/// anything. The docs test runs every command line of README.md and docs/ through it,
/// so a documented command that no longer parses is caught.
public enum DryParse {
    /// The environment variable that asks for a dry parse.
    public static let variable = "OFFLINE_DRY_PARSE"

    /// Exits after parsing when `OFFLINE_DRY_PARSE` is set; returns otherwise.
    public static func exitIfAsked<Command: ParsableCommand>(_ command: Command.Type) {
        guard getenv(variable) != nil else { return }
        do {
            _ = try command.parseAsRoot(Array(CommandLine.arguments.dropFirst()))
            exit(0)
        } catch {
            command.exit(withError: error)
        }
    }
}
