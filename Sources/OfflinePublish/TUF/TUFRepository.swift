import Crypto
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import OfflineAgent

/// Makes a publish directory a TUF repository (`docs/PROTOCOL.md`, "TUF repository"):
/// `metadata/` beside the app directories holds `N.root.json` (every version, kept
/// for ever), `N.targets.json`, `N.snapshot.json` and `timestamp.json`, Ed25519 over
/// canonical JSON, `consistent_snapshot: true`. Every app's `manifest.json`, packages
/// and patches are targets, listed with length and SHA-256 and also present under
/// their hash-prefixed names (`APP/<sha256>.manifest.json`, hard links).
///
/// `refresh` is the one entry point after a change: it signs new versions of the
/// metadata whose content changed (or that is due for re-signing), targets first,
/// `timestamp.json` last: a client sees the new release only once its timestamp is
/// in place, and never a version number reused.
public enum TUFRepository {
    /// The metadata directory's name inside the publish directory.
    public static let directoryName = "metadata"

    /// The versions `refresh` left in place.
    public struct Versions: Sendable, Equatable {
        public var root: Int64
        public var targets: Int64
        public var snapshot: Int64
        public var timestamp: Int64
    }

    /// Refuses, before anything is written, keys that are not the ones the
    /// repository's root names for `roles`, naming both fingerprints. A directory
    /// without metadata accepts any key (its first refresh writes the root).
    public static func checkKeys(publishDirectory: String, keys: TUFKeys, roles: [String] = ["targets", "snapshot", "timestamp"]) throws {
        guard let (_, root) = try latestRoot(in: metadataDirectory(publishDirectory)) else { return }
        for role in roles {
            let named = root.signers(of: role)
            let given = keys.keys(role)
            let valid = given.filter { named.keys.contains(Array($0.key.publicKey.rawRepresentation)) }
            guard !given.isEmpty, Set(valid.map(\.publicKeyBase64)).count >= named.threshold else {
                let theirs = root.role(role).keyIDs.compactMap { root.keys[$0]?.fingerprint }.joined(separator: ", ")
                let ours = given.map { TUFSigner.key($0).fingerprint }.joined(separator: ", ")
                throw PublishError(
                    .usage,
                    "--key \(ours.isEmpty ? "(none)" : ours) is not the key metadata/\(root.metadata.version).root.json names for \(role) (\(theirs), threshold \(named.threshold)): devices would refuse what it signs")
            }
        }
    }

    /// Signs what changed in `publishDirectory` since the last refresh.
    ///
    /// - Parameters:
    ///   - keys: the keys for the roles it signs; a directory without metadata needs
    ///     every role's (its `1.root.json` names them, threshold 1).
    ///   - now: the signing time, from which expiry is counted.
    /// - Returns: the versions of the four roles afterwards.
    @discardableResult
    public static func refresh(publishDirectory: String, keys: TUFKeys, now: Date, expiry: TUFExpiry = TUFExpiry()) throws -> Versions {
        let out = FileSystem.absolute(publishDirectory)
        // Metadata covers every app: verbs on two apps hold two app locks, so the
        // repository has its own (`.metadata.lock`; no app can be named `metadata`, the
        // metadata directory's name).
        let lock = try PublishLock(app: directoryName, publishDirectory: out)
        return try withExtendedLifetime(lock) { try refreshLocked(out: out, keys: keys, now: now, expiry: expiry) }
    }

    private static func refreshLocked(out: String, keys: TUFKeys, now: Date, expiry: TUFExpiry) throws -> Versions {
        let directory = metadataDirectory(out)
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try checkKeys(publishDirectory: out, keys: keys)

        var root: TUFRoot
        if let (_, latest) = try latestRoot(in: directory) {
            root = latest
            if expiry.isDue("root", expires: root.metadata.expires, now: now), !keys.root.isEmpty {
                // Renewed only when the keys given meet the root threshold (an m-of-n root is
                // renewed with `root propose|sign|commit`): devices would refuse it otherwise.
                let file = try TUFSigner.file(renewed(root, expires: now + expiry.root, version: root.metadata.version + 1), keys: keys.root)
                if (try? root.verify(TUFRoot(file).metadata, as: "root")) != nil {
                    root = try write(file, in: directory)
                }
            }
        } else {
            guard ["root", "targets", "snapshot", "timestamp"].allSatisfy({ !keys.keys($0).isEmpty }) else {
                throw PublishError(.usage, "a publish directory without metadata/ needs a key for every role to write its 1.root.json")
            }
            root = try write(TUFSigner.file(newRoot(keys: keys, expires: now + expiry.root), keys: keys.root), in: directory)
        }

        // After a rotation, metadata the new root's keys did not sign is re-signed: devices
        // on the new root would refuse it (threshold-not-met).
        let current = currentChain(in: directory)
        func unsigned(_ metadata: TUFMetadata?, _ role: String) -> Bool {
            metadata.map { (try? root.verify($0, as: role)) == nil } ?? true
        }
        let desired = try collectTargets(out)
        var targetsVersion = current.targets?.metadata.version
        if current.targets == nil || current.targets?.targets != desired || unsigned(current.targets?.metadata, "targets")
            || expiry.isDue("targets", expires: current.targets?.metadata.expires ?? now, now: now) {
            let version = nextVersion("targets", in: directory)
            var signed = TUFSigner.common(type: "targets", version: version, expires: now + expiry.targets)
            signed["targets"] = .object(desired.mapValues(\.json))
            try writeFile(TUFSigner.file(signed, keys: keys.targets), "\(version).targets.json", in: directory)
            targetsVersion = version
        }
        guard let targetsVersion else { throw PublishError(.publish, "no targets metadata", path: directory) }

        var snapshotVersion = current.snapshot?.metadata.version
        if snapshotVersion == nil || current.snapshot?.meta["targets.json"]?.version != targetsVersion
            || unsigned(current.snapshot?.metadata, "snapshot") || expiry.isDue("snapshot", expires: current.snapshot?.metadata.expires ?? now, now: now) {
            let version = nextVersion("snapshot", in: directory)
            var signed = TUFSigner.common(type: "snapshot", version: version, expires: now + expiry.snapshot)
            signed["meta"] = .object(["targets.json": TUFMetaFile(version: targetsVersion).json])
            try writeFile(TUFSigner.file(signed, keys: keys.snapshot), "\(version).snapshot.json", in: directory)
            snapshotVersion = version
        }
        guard let snapshotVersion else { throw PublishError(.publish, "no snapshot metadata", path: directory) }

        var timestampVersion = current.timestamp?.metadata.version ?? 0
        if current.timestamp?.snapshot.version != snapshotVersion || unsigned(current.timestamp?.metadata, "timestamp")
            || expiry.isDue("timestamp", expires: current.timestamp?.metadata.expires ?? now, now: now) {
            timestampVersion += 1
            try writeTimestamp(version: timestampVersion, snapshot: snapshotVersion, expires: now + expiry.timestamp, keys: keys.timestamp, in: directory)
        }
        return Versions(root: root.metadata.version, targets: targetsVersion, snapshot: snapshotVersion, timestamp: timestampVersion)
    }

    /// Signs a new `timestamp.json` (version + 1, the same snapshot) valid until
    /// `expires`: freshness only, with the timestamp key alone (`offline-publish
    /// timestamp`, a cron line on the host).
    ///
    /// - Parameter unlessValidUntil: leave a timestamp that is valid until then as it is,
    ///   decided under the lock (`offline-server --timestamp-key`: a verb may have
    ///   re-signed it meanwhile).
    /// - Returns: the timestamp version in place afterwards (the new one when re-signed).
    @discardableResult
    public static func refreshTimestamp(publishDirectory: String, key: SigningKey, expires: Date, unlessValidUntil: Date? = nil) throws -> Int64 {
        let lock = try PublishLock(app: directoryName, publishDirectory: FileSystem.absolute(publishDirectory))
        return try withExtendedLifetime(lock) {
            try refreshTimestampLocked(publishDirectory: publishDirectory, key: key, expires: expires, unlessValidUntil: unlessValidUntil)
        }
    }

    private static func refreshTimestampLocked(publishDirectory: String, key: SigningKey, expires: Date, unlessValidUntil: Date?) throws -> Int64 {
        let directory = metadataDirectory(FileSystem.absolute(publishDirectory))
        let keys = TUFKeys(timestamp: [key])
        try checkKeys(publishDirectory: publishDirectory, keys: keys, roles: ["timestamp"])
        guard let timestamp = currentChain(in: directory).timestamp else {
            throw PublishError(.usage, "\(directory)/timestamp.json is missing or unreadable: publish with --key first", path: directory)
        }
        if let unlessValidUntil, timestamp.metadata.expires >= unlessValidUntil { return timestamp.metadata.version }
        let version = timestamp.metadata.version + 1
        try writeTimestamp(version: version, snapshot: timestamp.snapshot.version, expires: expires, keys: keys.timestamp, in: directory)
        return version
    }

    /// When the directory's root and the metadata its timestamp leads to expire, each
    /// marked `soon` within an eighth of its default life (at most 7 days): what
    /// `offline-publish` warns about after each command. Empty without metadata.
    package static func expiryNotices(publishDirectory: String, now: Date, expiry: TUFExpiry = TUFExpiry()) -> [TUFExpiryNotice] {
        let directory = metadataDirectory(FileSystem.absolute(publishDirectory))
        let chain = currentChain(in: directory)
        let root = (try? latestRoot(in: directory))??.1.metadata
        let all: [(String, TUFMetadata?)] = [
            ("root", root), ("targets", chain.targets?.metadata), ("snapshot", chain.snapshot?.metadata), ("timestamp", chain.timestamp?.metadata),
        ]
        return all.compactMap { role, metadata in
            metadata.map { TUFExpiryNotice(role: role, version: $0.version, expires: $0.expires, lifetime: expiry.lifetime(role), now: now) }
        }
    }

    // MARK: Steps

    static func metadataDirectory(_ publishDirectory: String) -> String { "\(publishDirectory)/\(directoryName)" }

    /// The highest `N.root.json` of the directory, parsed.
    static func latestRoot(in directory: String) throws -> (Int64, TUFRoot)? {
        guard let version = versions("root", in: directory).max() else { return nil }
        let path = "\(directory)/\(version).root.json"
        guard let bytes = FileManager.default.contents(atPath: path) else { throw PublishError(.publish, "cannot read root metadata", path: path) }
        return (version, try TUFRoot(bytes))
    }

    /// The metadata `timestamp.json` leads to; nil parts where a file is missing or unreadable.
    static func currentChain(in directory: String) -> (timestamp: TUFTimestamp?, snapshot: TUFSnapshot?, targets: TUFTargets?) {
        let timestamp = FileManager.default.contents(atPath: "\(directory)/timestamp.json").flatMap { try? TUFTimestamp($0) }
        let snapshot = timestamp.flatMap { FileManager.default.contents(atPath: "\(directory)/\($0.snapshot.version).snapshot.json") }
            .flatMap { try? TUFSnapshot($0) }
        let targets = snapshot?.meta["targets.json"].flatMap { FileManager.default.contents(atPath: "\(directory)/\($0.version).targets.json") }
            .flatMap { try? TUFTargets($0) }
        return (timestamp, snapshot, targets)
    }

    /// Every `APP/manifest.json`, package and patch of the apps in `out`, with hard
    /// links under their hash-prefixed names (made here when missing).
    static func collectTargets(_ out: String) throws -> [String: TUFTargetFile] {
        var targets: [String: TUFTargetFile] = [:]
        let names = (try? FileManager.default.contentsOfDirectory(atPath: out)) ?? []
        for app in names.sorted() where AppName.isValid(app) {
            let appDirectory = "\(out)/\(app)"
            guard FileSystem.exists("\(appDirectory)/\(PublishState.fileName)"), let state = try PublishState.load(appDirectory: appDirectory) else { continue }
            var files: [(String, TUFTargetFile)] = []
            let manifest = try PublishFileWriter.digest(of: "\(appDirectory)/\(Publisher.manifestFile)")
            files.append((Publisher.manifestFile, TUFTargetFile(length: manifest.size, sha256: manifest.sha256)))
            for release in state.versions {
                files.append((release.packageFile, TUFTargetFile(length: release.size, sha256: release.sha256)))
                files.append((release.gzipFile, TUFTargetFile(length: release.gzipSize, sha256: release.gzipSha256)))
            }
            for patch in state.patches {
                files.append((patch.file, TUFTargetFile(length: patch.size, sha256: patch.sha256)))
            }
            for (name, target) in files {
                let path = "\(appDirectory)/\(name)"
                // A release whose files were removed by hand is no target any more.
                guard FileSystem.fileSize(path) == target.length, let sha256 = target.sha256 else { continue }
                let prefixed = "\(appDirectory)/\(sha256).\(name)"
                if !FileSystem.exists(prefixed), link(path, prefixed) != 0, errno != EEXIST {
                    throw PublishError(.publish, "cannot link a target under its hash-prefixed name", path: prefixed, underlying: POSIXFailure("link"))
                }
                targets["\(app)/\(name)"] = target
            }
        }
        return targets
    }

    static func newRoot(keys: TUFKeys, expires: Date) -> [String: StrictJSON] {
        var signed = TUFSigner.common(type: "root", version: 1, expires: expires)
        var all: [String: StrictJSON] = [:]
        var roles: [String: StrictJSON] = [:]
        for role in ["root", "targets", "snapshot", "timestamp"] {
            let listed = keys.keys(role).map(TUFSigner.key)
            for key in listed { all[key.keyID] = key.json }
            roles[role] = TUFRole(keyIDs: Array(Set(listed.map(\.keyID))).sorted(), threshold: 1).json
        }
        signed["keys"] = .object(all)
        signed["roles"] = .object(roles)
        signed["consistent_snapshot"] = .bool(true)
        return signed
    }

    /// `root`'s signed fields as version `version`, expiring at `expires`.
    static func renewed(_ root: TUFRoot, expires: Date, version: Int64) -> [String: StrictJSON] {
        var signed = root.metadata.signed.members
        signed["version"] = .number(String(version))
        signed["expires"] = .string(TUFMetadata.string(expires))
        return signed
    }

    private static func write(_ file: Data, in directory: String) throws -> TUFRoot {
        let root = try TUFRoot(file)
        try writeFile(file, "\(root.metadata.version).root.json", in: directory)
        return root
    }

    private static func writeTimestamp(version: Int64, snapshot: Int64, expires: Date, keys: [SigningKey], in directory: String) throws {
        var signed = TUFSigner.common(type: "timestamp", version: version, expires: expires)
        signed["meta"] = .object(["snapshot.json": TUFMetaFile(version: snapshot).json])
        try writeFile(TUFSigner.file(signed, keys: keys), "timestamp.json", in: directory)
    }

    private static func writeFile(_ data: Data, _ name: String, in directory: String) throws {
        do {
            try FileSystem.writeAtomically(data, to: "\(directory)/\(name)")
        } catch {
            throw PublishError(.publish, "cannot write TUF metadata", path: "\(directory)/\(name)", underlying: error)
        }
    }

    /// One more than the highest `N.role.json` present, so no number is ever reused,
    /// even one a crash left unreferenced.
    private static func nextVersion(_ role: String, in directory: String) -> Int64 {
        (versions(role, in: directory).max() ?? 0) + 1
    }

    private static func versions(_ role: String, in directory: String) -> [Int64] {
        let suffix = ".\(role).json"
        return ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).compactMap {
            $0.hasSuffix(suffix) ? Int64($0.dropLast(suffix.count)) : nil
        }.filter { $0 > 0 }
    }
}
