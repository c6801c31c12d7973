import Crypto
import FoundationEssentials

/// The trusted metadata of one repository under the agent's root:
/// `<root>/tuf/<id>/{root,timestamp,snapshot,targets}.json` and
/// `<root>/tuf/<id>/delegated/<sha256 of the role name>.json`, the last verified bytes
/// of each target the client fetched itself (the manifest, a rollout file) in
/// `<root>/tuf/<id>/target/<sha256 of the target path>.json`, and the ETag of the trusted
/// timestamp in `timestamp-etag.json`, with `<id>` the first
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

    /// The name a target's last verified bytes are kept under: the hex SHA-256 of its
    /// path. Reused only while they still match the length and hashes targets lists.
    package static func targetName(_ path: String) -> String {
        "target/" + SHA256.hash(data: Data(path.utf8)).hex
    }

    /// The ETag `timestamp.json` was served with, when it was served with the bytes
    /// `timestamp` (the trusted timestamp as kept): the record names the SHA-256 of the
    /// bytes it belongs to, so a crash between the two writes, or a timestamp replaced
    /// since, sends no `If-None-Match`.
    package func timestampETag(for timestamp: [UInt8]) -> String? {
        guard let record = read(Self.etagName) else { return nil }
        let parts = String(decoding: record, as: UTF8.self).split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0] == SHA256.hash(data: timestamp).hex else { return nil }
        return String(parts[1])
    }

    /// Keeps the ETag `timestamp.json` was served with beside the bytes it was served
    /// with; an ETag that is not a short printable header value is not kept.
    package func keepTimestampETag(_ etag: String?, for timestamp: [UInt8]) throws {
        guard let etag, (1...Self.maxETagBytes).contains(etag.utf8.count), etag.utf8.allSatisfy({ (0x21...0x7e).contains($0) }) else {
            if read(Self.etagName) != nil { remove(Self.etagName) }
            return
        }
        let record = Array("\(SHA256.hash(data: timestamp).hex) \(etag)".utf8)
        guard read(Self.etagName) != record else { return }
        try write(Self.etagName, record)
    }

    private static let etagName = "timestamp-etag"
    /// Longer ETags are not kept (nginx's are about 20 bytes).
    private static let maxETagBytes = 256

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
