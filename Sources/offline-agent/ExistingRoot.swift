import FoundationEssentials
import OfflineAgent

/// The `--root` of every command but `sync`: those only read or adjust what a sync
/// made, so a missing root is a mistake (a typo, a disk not mounted) to report, never
/// a directory to create.
enum ExistingRoot {
    /// `path` as a URL when it is an existing directory.
    ///
    /// - Parameter phase: the phase the error names: `.usage` (exit 64) for the commands
    ///   whose argument is wrong, `.serve` for `serve`, never `install` (nothing was being installed).
    /// - Throws: `OfflineAgentError(phase, cause: .stateInvalid)` naming the path and the way out.
    static func url(_ path: String, phase: OfflineAgentError.Code = .usage) throws -> URL {
        var isDirectory = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory else {
            throw OfflineAgentError(
                phase, "no agent root there: nothing was synced to it (check --root, or run offline-agent sync --root with this path first)",
                cause: .stateInvalid, path: path)
        }
        return URL(fileURLWithPath: path)
    }
}
