import Crypto
import Foundation
import OfflineAgent
import OfflinePublish

/// Builds signed TUF metadata by hand, for the tests that need metadata a repository
/// would never write: wrong versions, missing signatures, expired, mixed.
package struct TUFFixture {
    package var root = [SigningKey.generate()]
    package var timestamp = [SigningKey.generate()]
    package var snapshot = [SigningKey.generate()]
    package var targets = [SigningKey.generate()]
    package var thresholds = ["root": 1, "timestamp": 1, "snapshot": 1, "targets": 1]
    package var later = Date().addingTimeInterval(86_400 * 30)

    package init() {}

    package func keys(_ role: String) -> [SigningKey] {
        switch role {
        case "root": root
        case "timestamp": timestamp
        case "snapshot": snapshot
        default: targets
        }
    }

    /// Root metadata `version` naming this fixture's keys, signed by `signers` (default: its root keys).
    package func rootFile(version: Int64 = 1, expires: Date? = nil, signers: [SigningKey]? = nil, extra: [String: StrictJSON] = [:]) throws -> Data {
        var signed = TUFSigner.common(type: "root", version: version, expires: expires ?? later)
        var keys: [String: StrictJSON] = [:]
        var roles: [String: StrictJSON] = [:]
        for role in ["root", "timestamp", "snapshot", "targets"] {
            let listed = self.keys(role).map(TUFSigner.key)
            for key in listed { keys[key.keyID] = key.json }
            roles[role] = TUFRole(keyIDs: listed.map(\.keyID), threshold: thresholds[role] ?? 1).json
        }
        signed["keys"] = .object(keys)
        signed["roles"] = .object(roles)
        signed["consistent_snapshot"] = .bool(true)
        signed.merge(extra) { $1 }
        return try TUFSigner.file(signed, keys: signers ?? root)
    }

    package func timestampFile(version: Int64, snapshot: Int64, expires: Date? = nil, snapshotFile: Data? = nil, signers: [SigningKey]? = nil) throws -> Data {
        var signed = TUFSigner.common(type: "timestamp", version: version, expires: expires ?? later)
        let hashes = snapshotFile.map { ["sha256": SHA256.hash(data: $0).hex] }
        signed["meta"] = .object(["snapshot.json": TUFMetaFile(version: snapshot, length: snapshotFile.map { Int64($0.count) }, hashes: hashes).json])
        return try TUFSigner.file(signed, keys: signers ?? timestamp)
    }

    package func snapshotFile(version: Int64, targets: Int64, expires: Date? = nil, signers: [SigningKey]? = nil) throws -> Data {
        var signed = TUFSigner.common(type: "snapshot", version: version, expires: expires ?? later)
        signed["meta"] = .object(["targets.json": TUFMetaFile(version: targets).json])
        return try TUFSigner.file(signed, keys: signers ?? snapshot)
    }

    package func targetsFile(version: Int64, files: [String: Data] = [:], expires: Date? = nil, signers: [SigningKey]? = nil) throws -> Data {
        var signed = TUFSigner.common(type: "targets", version: version, expires: expires ?? later)
        signed["targets"] = .object(files.mapValues { TUFTargetFile(length: Int64($0.count), sha256: SHA256.hash(data: $0).hex).json })
        return try TUFSigner.file(signed, keys: signers ?? targets)
    }
}
