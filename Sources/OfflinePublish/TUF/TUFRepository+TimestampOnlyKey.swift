import Foundation
import OfflineAgent

extension TUFRepository {
    /// Refuses `key` as a key to keep the timestamp fresh online (`offline-server
    /// --timestamp-key`) unless the directory's root names it for the timestamp role and
    /// for no other: a server holding the root, targets or snapshot key online could sign
    /// what devices install, or which targets they see, not only freshness. The simple
    /// path's one key holds every role, so it is refused too; the message says what to do.
    ///
    /// - Throws: `.usage` naming the key's fingerprint and the root's, or the other roles
    ///   it holds; `.usage` for a directory without TUF metadata.
    public static func checkTimestampOnlyKey(publishDirectory: String, key: SigningKey) throws {
        let directory = metadataDirectory(FileSystem.absolute(publishDirectory))
        guard let (version, root) = try latestRoot(in: directory) else {
            throw PublishError(.usage, "--timestamp-key needs a TUF repository: no \(directoryName)/N.root.json (publish with --key first)", path: directory)
        }
        // The timestamp key first: a stranger's key gets the message that names both fingerprints.
        try checkKeys(publishDirectory: publishDirectory, keys: TUFKeys(timestamp: [key]), roles: ["timestamp"])
        let raw = Array(key.key.publicKey.rawRepresentation)
        let also = ["root", "targets", "snapshot"].filter { root.signers(of: $0).keys.contains(raw) }
        guard also.isEmpty else {
            throw PublishError(
                .usage,
                "--timestamp-key \(TUFSigner.key(key).fingerprint) is also the \(also.joined(separator: ", ")) key of \(directoryName)/\(version).root.json: "
                    + "a server holding it online could sign releases, not only freshness; give the timestamp role a key of its own "
                    + "(offline-publish root propose --timestamp-key T.pub, docs/PUBLISHING.md) or run offline-publish timestamp from cron")
        }
    }
}
