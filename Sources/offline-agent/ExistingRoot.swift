import FoundationEssentials
import OfflineAgent

/// The `--root` of every command but `sync`: those only read or adjust what a sync
/// made, so a missing root is a mistake (a typo, a disk not mounted) to report, never
/// a directory to create.
enum ExistingRoot {
    /// `path` as a URL when it is an existing directory.
    ///
    /// - Throws: `OfflineAgentError(.install, cause: .stateInvalid)` naming the path (exit 1).
    static func url(_ path: String) throws -> URL {
        var isDirectory = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory else {
            throw OfflineAgentError(
                .install, "no agent root there: nothing was synced to it (check --root)", cause: .stateInvalid, path: path)
        }
        return URL(fileURLWithPath: path)
    }
}
