import ArgumentParser
import OfflineAgent

extension OfflineAgentError: CommandFailure {
    /// The process exit status the command-line tools use for this error: 75 (`EX_TEMPFAIL`)
    /// when another run holds the lock, 64 (`EX_USAGE`) for usage, 1 otherwise.
    ///
    /// The library reports causes; turning them into exit statuses is the tools' business.
    public var exitStatus: Int32 {
        switch code {
        case .busy: 75
        case .usage: 64
        default: 1
        }
    }

    /// `phase: reason (path): underlying`.
    public var messageLine: String { description }

    /// The same status as an `ExitCode` for swift-argument-parser.
    public var exitCode: ExitCode { ExitCode(exitStatus) }
}
