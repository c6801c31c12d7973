import Crypto
import FoundationEssentials

/// The trusted metadata of one repository under the agent's root:
/// `<root>/tuf/<id>/{root,timestamp,snapshot,targets}.json` and
/// `<root>/tuf/<id>/delegated/<sha256 of the role name>.json`, with `<id>` the first
/// 16 bytes of the SHA-256 of the repository's base URL. Kept per repository, not per
/// app: every app of one publish directory shares it.
///
/// Each file is replaced atomically (temp file, fsync, rename, directory fsync) and
/// only after it was verified, in the specification's order, so a `kill -9` between
/// two writes leaves files that each verified, never an older timestamp than one
/// accepted; files that no longer fit together (a timestamp written, its snapshot
/// not yet) are what the next refresh downloads anew.
package struct TUFMetadataStore: Sendable {
    package let directory: String

    package init(agentRoot: String, repository: URL) {
        let id = SHA256.hash(data: Data(repository.absoluteString.utf8)).prefix(16).hex
        directory = "\(agentRoot)/tuf/\(id)"
    }

    /// The name a delegated role's metadata is kept under: the hex SHA-256 of its name,
    /// so a hostile name (`../x`, 300 bytes) is never a path.
    package static func delegatedName(_ role: String) -> String {
        "delegated/" + SHA256.hash(data: Data(role.utf8)).hex
    }

    package func read(_ role: String) -> [UInt8]? {
        guard let data = FileManager.default.contents(atPath: path(role)) else { return nil }
        return Array(data)
    }

    package func write(_ role: String, _ bytes: [UInt8]) throws {
        do {
            try FileManager.default.createDirectory(atPath: FileSystem.parent(of: path(role)), withIntermediateDirectories: true)
            try FileSystem.writeAtomically(Data(bytes), to: path(role))
        } catch {
            throw OfflineAgentError(.install, "cannot keep trusted \(role) metadata", cause: .io, path: path(role), underlying: error)
        }
    }

    /// Removes trusted metadata that a new root's keys no longer vouch for.
    package func remove(_ role: String) {
        FileSystem.remove(path(role))
    }

    private func path(_ role: String) -> String { "\(directory)/\(role).json" }
}
