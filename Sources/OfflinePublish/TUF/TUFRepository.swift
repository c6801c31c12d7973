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
    /// repository's metadata names for `roles` (by default every role `keys` holds a key
    /// for but root: delegated roles first, then targets, snapshot, timestamp), naming
    /// both fingerprints. A top-level role is named by the latest root, a delegated role
    /// by `delegations` (by default the published top-level targets'). A directory
    /// without metadata accepts any key (its first refresh writes the root).
    public static func checkKeys(publishDirectory: String, keys: TUFKeys, roles: [String]? = nil) throws {
        try checkKeys(publishDirectory: publishDirectory, keys: keys, roles: roles, delegations: nil)
    }

    static func checkKeys(publishDirectory: String, keys: TUFKeys, roles: [String]?, delegations: TUFDelegations?) throws {
        let directory = metadataDirectory(FileSystem.absolute(publishDirectory))
        guard let (_, root) = try latestRoot(in: directory) else { return }
        let roles = roles ?? (keys.delegated.keys.sorted() + ["targets", "snapshot", "timestamp"].filter { !keys.keys($0).isEmpty })
        for role in roles {
            let given = keys.keys(role)
            let source: String, keyIDs: [String], named: [String: TUFKey], threshold: Int
            if TUFMetadata.topLevelRoles.contains(role) {
                (source, keyIDs, named, threshold) = ("metadata/\(root.metadata.version).root.json", root.role(role).keyIDs, root.keys, root.role(role).threshold)
            } else {
                let targets = currentChain(in: directory).targets
                guard let delegations = delegations ?? targets?.delegations, let delegated = delegations.roles.first(where: { $0.name == role }) else {
                    throw PublishError(.usage, "metadata/\(targets?.metadata.version ?? 0).targets.json delegates no role '\(role)'")
                }
                (source, keyIDs, named, threshold) = (
                    "metadata/\(targets?.metadata.version ?? 0).targets.json", delegated.role.keyIDs, delegations.keys, delegated.role.threshold
                )
            }
            let trusted = Set(keyIDs.compactMap { named[$0].map { Array($0.publicKey.rawRepresentation) } })
            let valid = Set(given.map { Array($0.key.publicKey.rawRepresentation) }).intersection(trusted)
            guard !given.isEmpty, valid.count >= threshold else {
                let theirs = keyIDs.compactMap { named[$0]?.fingerprint }.joined(separator: ", ")
                let ours = given.map { TUFSigner.key($0).fingerprint }.joined(separator: ", ")
                throw PublishError(
                    .usage,
                    "--key \(ours.isEmpty ? "(none)" : ours) is not the key \(source) names for \(role) (\(theirs), threshold \(threshold)): devices would refuse what it signs")
            }
        }
    }

    /// The keys a release verb on `app` signs with: `key` signs the app's targets (the
    /// top-level targets role, or only the app's delegated role once `delegate` gave it
    /// one), `snapshotKey` (by default `key`) snapshot and timestamp.
    public static func verbKeys(app: String, publishDirectory: String, key: SigningKey, snapshotKey: SigningKey?) -> TUFKeys {
        let online = snapshotKey ?? key
        let directory = metadataDirectory(FileSystem.absolute(publishDirectory))
        // The app's own role (`delegate --app-key`), never a halt role of a like name.
        if currentChain(in: directory).targets?.delegations?.roles.contains(where: { $0.name == app && $0.paths == ["\(app)/*"] }) == true {
            return TUFKeys(snapshot: [online], timestamp: [online], delegated: [app: [key]])
        }
        var keys = TUFKeys(all: key)
        keys.snapshot = [online]
        keys.timestamp = [online]
        return keys
    }

    /// The name of `app`'s halt role, trusted for `APP/rollout.json` alone.
    public static func haltRole(_ app: String) -> String { "\(app).halt" }

    /// Delegates `app` to `appKey` (`offline-publish delegate`): a terminating role
    /// named `app` for the paths `APP/*`, threshold 1, in the top-level targets (replacing
    /// the app's earlier key, if any). The app's files move from the top-level targets to
    /// `N.APP.json`, signed here by `appKey` so the app is never unlisted; from then on a
    /// verb on the app signs with `appKey` and nothing else can. `keys` holds the targets
    /// key (checked against root) and the snapshot and timestamp keys.
    ///
    /// With `halt`, the role is the app's halt role instead (`APP.halt`, the path
    /// `APP/rollout.json` only, listed before every app's role so a search finds it
    /// first): its key can narrow or halt the app's staged rollout and nothing else
    /// (`halt`, `offline-server --halt-key`).
    ///
    /// Holds the app's lock, then the repository's, waiting at most `lockWait` for each.
    @discardableResult
    public static func delegate(
        app: String, publishDirectory: String, appKey: SigningKey, halt: Bool = false, keys: TUFKeys, now: Date, expiry: TUFExpiry = TUFExpiry(),
        lockWait: Duration = PublishLock.defaultWait
    ) throws -> Versions {
        guard AppName.isValid(app), !TUFMetadata.topLevelRoles.contains(app), !app.hasSuffix(".halt") else {
            throw PublishError(.usage, "'\(app)' cannot name a delegated role (an app name, not root, targets, snapshot or timestamp, not ending in .halt)")
        }
        let name = halt ? haltRole(app) : app
        let out = FileSystem.absolute(publishDirectory)
        // The app's lock first, as a release verb holds it from its key check to its
        // metadata refresh: delegated in between, the verb committed and then failed to
        // sign, leaving metadata that lists a manifest no longer on disk.
        let appLock = try PublishLock(app: app, publishDirectory: out, wait: lockWait)
        let lock = try PublishLock(app: directoryName, publishDirectory: out, wait: lockWait)
        return try withExtendedLifetime((appLock, lock)) {
            try PublishRecovery.recover(app: app, publishDirectory: out)
            let directory = metadataDirectory(out)
            guard let current = currentChain(in: directory).targets else {
                throw PublishError(.usage, "\(directory) has no targets metadata: publish with --key first", path: directory)
            }
            try checkKeys(publishDirectory: out, keys: keys, roles: ["targets", "snapshot", "timestamp"])
            let key = TUFSigner.key(appKey)
            var roles = current.delegations?.roles ?? []
            let role = TUFDelegatedRole(
                name: name, role: TUFRole(keyIDs: [key.keyID], threshold: 1), terminating: true, paths: [halt ? "\(app)/\(TUFRollout.fileName)" : "\(app)/*"])
            if let index = roles.firstIndex(where: { $0.name == name }) {
                roles[index] = role
            } else if halt {
                roles.insert(role, at: 0)
            } else {
                roles.append(role)
            }
            var all = current.delegations?.keys ?? [:]
            all[key.keyID] = key
            // Keys no role names any more leave (an app's replaced key is no key at all).
            let named = Set(roles.flatMap(\.role.keyIDs))
            var withApp = keys
            withApp.delegated = [name: [appKey]]
            return try refreshLocked(
                out: out, keys: withApp, now: now, expiry: expiry, delegations: TUFDelegations(keys: all.filter { named.contains($0.key) }, roles: roles))
        }
    }

    /// Signs what changed in `publishDirectory` since the last refresh.
    ///
    /// - Parameters:
    ///   - keys: the keys for the roles it signs; a directory without metadata needs
    ///     every top-level role's (its `1.root.json` names them, threshold 1). A role
    ///     whose key is not given is left as it is (an app's key changes only its own
    ///     `N.APP.json`; the targets key leaves delegated apps' metadata to their keys).
    ///   - now: the signing time, from which expiry is counted.
    /// - Returns: the versions of the four top-level roles afterwards.
    ///   - overriding: an app whose halt by its halt key this refresh ends (a release verb
    ///     on it): the role listing its manifest is signed anew even if unchanged, so the
    ///     rollout file names a listing that is no longer current.
    @discardableResult
    public static func refresh(
        publishDirectory: String, keys: TUFKeys, now: Date, expiry: TUFExpiry = TUFExpiry(), overriding app: String? = nil
    ) throws -> Versions {
        let out = FileSystem.absolute(publishDirectory)
        // Metadata covers every app: verbs on two apps hold two app locks, so the
        // repository has its own (`.metadata.lock`; no app can be named `metadata`, the
        // metadata directory's name).
        let lock = try PublishLock(app: directoryName, publishDirectory: out)
        return try withExtendedLifetime(lock) {
            try refreshLocked(out: out, keys: keys, now: now, expiry: expiry, delegations: nil, overriding: app)
        }
    }

    /// `delegations`: the top-level targets' new delegations (`delegate`), else kept.
    private static func refreshLocked(
        out: String, keys: TUFKeys, now: Date, expiry: TUFExpiry, delegations newDelegations: TUFDelegations?, overriding app: String? = nil
    ) throws -> Versions {
        let directory = metadataDirectory(out)
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try checkKeys(publishDirectory: out, keys: keys, roles: nil, delegations: newDelegations)

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
        // The listing a halt by the app's halt key names, which this refresh replaces.
        let lifted = app.flatMap { rolloutStage(app: $0, publishDirectory: out) == nil ? nil : listing(of: "\($0)/\(Publisher.manifestFile)", in: directory)?.role }
        func unsigned(_ metadata: TUFMetadata?, _ role: String) -> Bool {
            metadata.map { (try? root.verify($0, as: role)) == nil } ?? true
        }
        // Each target goes to the role a client's search finds first for it: the first
        // delegated role whose paths match, else the top-level targets.
        let delegations = newDelegations ?? current.targets?.delegations
        var desired: [String: [String: TUFTargetFile]] = ["targets": [:]]
        for (path, target) in try collectTargets(out) {
            desired[delegations?.roles(for: path).first?.name ?? "targets", default: [:]][path] = target
        }
        var targetsVersion = current.targets?.metadata.version
        if current.targets == nil || newDelegations != nil || lifted == "targets" || current.targets?.targets != desired["targets"] || unsigned(current.targets?.metadata, "targets")
            || expiry.isDue("targets", expires: current.targets?.metadata.expires ?? now, now: now), !keys.targets.isEmpty {
            let version = nextVersion("targets", in: directory)
            var signed = TUFSigner.common(type: "targets", version: version, expires: now + expiry.targets)
            signed["targets"] = .object((desired["targets"] ?? [:]).mapValues(\.json))
            if let delegations { signed["delegations"] = delegations.json }
            try writeFile(TUFSigner.file(signed, keys: keys.targets), "\(version).targets.json", in: directory)
            targetsVersion = version
        }
        guard let targetsVersion else { throw PublishError(.usage, "no targets metadata yet: the first keyed publish needs the targets key", path: directory) }

        // Snapshot lists every role it listed before (a device refuses a snapshot that
        // drops one), the top-level targets, and each delegated role's latest metadata.
        var meta = current.snapshot?.meta ?? [:]
        meta["targets.json"] = TUFMetaFile(version: targetsVersion)
        for role in delegations?.roles ?? [] {
            let existing = current.snapshot?.meta["\(role.name).json"]
                .flatMap { FileManager.default.contents(atPath: "\(directory)/\($0.version).\(role.name).json") }
                .flatMap { try? TUFTargets($0) }
            var version = existing?.metadata.version
            let held = keys.delegated[role.name] ?? []
            let unsignedByRole = existing.map { (try? delegations?.verify($0.metadata, as: role.name)) == nil } ?? true
            if !held.isEmpty, existing == nil || lifted == role.name || existing?.targets != desired[role.name] ?? [:] || unsignedByRole
                || expiry.isDue("targets", expires: existing?.metadata.expires ?? now, now: now) {
                let next = nextVersion(role.name, in: directory)
                var signed = TUFSigner.common(type: "targets", version: next, expires: now + expiry.targets)
                signed["targets"] = .object((desired[role.name] ?? [:]).mapValues(\.json))
                try writeFile(TUFSigner.file(signed, keys: held), "\(next).\(role.name).json", in: directory)
                PublishStep.afterDelegatedMetadata.reached()
                version = next
            }
            if let version { meta["\(role.name).json"] = TUFMetaFile(version: version) }
        }

        var snapshotVersion = current.snapshot?.metadata.version
        if snapshotVersion == nil || current.snapshot?.meta != meta
            || unsigned(current.snapshot?.metadata, "snapshot") || expiry.isDue("snapshot", expires: current.snapshot?.metadata.expires ?? now, now: now) {
            guard !keys.snapshot.isEmpty else { throw PublishError(.usage, "the snapshot must be re-signed: give the snapshot key (--snapshot-key)") }
            let version = nextVersion("snapshot", in: directory)
            var signed = TUFSigner.common(type: "snapshot", version: version, expires: now + expiry.snapshot)
            signed["meta"] = .object(Dictionary(uniqueKeysWithValues: meta.map { ($0.key, $0.value.json) }))
            try writeFile(TUFSigner.file(signed, keys: keys.snapshot), "\(version).snapshot.json", in: directory)
            snapshotVersion = version
        }
        guard let snapshotVersion else { throw PublishError(.publish, "no snapshot metadata", path: directory) }

        var timestampVersion = current.timestamp?.metadata.version ?? 0
        if current.timestamp?.snapshot.version != snapshotVersion || unsigned(current.timestamp?.metadata, "timestamp")
            || expiry.isDue("timestamp", expires: current.timestamp?.metadata.expires ?? now, now: now) {
            guard !keys.timestamp.isEmpty else { throw PublishError(.usage, "the timestamp must be re-signed: give the timestamp key (--snapshot-key)") }
            timestampVersion += 1
            try writeTimestamp(version: timestampVersion, snapshot: snapshotVersion, expires: now + expiry.timestamp, keys: keys.timestamp, in: directory)
        }
        return Versions(root: root.metadata.version, targets: targetsVersion, snapshot: snapshotVersion, timestamp: timestampVersion)
    }

    /// Narrows the staged rollout of `app`'s current manifest to at most `stage` % (0
    /// halts) with the app's halt key alone (`offline-publish halt`, `offline-server
    /// --halt-key`): writes `APP/rollout.json` naming the manifest's SHA-256 and the role
    /// and version whose metadata lists it, then the halt role's `N.APP.halt.json`,
    /// snapshot and timestamp (`snapshotKey`, by default `key`). Nothing else changes: not
    /// `state.json`, not the manifest. The operator's next verb on the app keeps the halt
    /// in `state.json` (`stage` sets the stage itself) and signs a new listing, which the
    /// rollout file no longer names. Holds the app's lock, then the repository's, as
    /// every release verb does, so no verb commits between the halt's read and its write.
    ///
    /// - Returns: false when a rollout file already narrows this manifest to `stage` or
    ///   less and the halt role's metadata is not due for re-signing (nothing written);
    ///   so `stage` 100 renews that metadata, narrowing nothing.
    @discardableResult
    public static func halt(
        app: String, publishDirectory: String, key: SigningKey, snapshotKey: SigningKey? = nil, stage: Int, reason: String?, now: Date,
        expiry: TUFExpiry = TUFExpiry(), lockWait: Duration = PublishLock.defaultWait
    ) throws -> Bool {
        guard (0...100).contains(stage) else { throw PublishError(.usage, "stage \(stage) is outside 0…100") }
        guard AppName.isValid(app) else { throw PublishError(.usage, "'\(app)' is not a valid app name") }
        let out = FileSystem.absolute(publishDirectory)
        guard FileSystem.isDirectory("\(out)/\(app)") else { throw PublishError(.usage, "\(out)/\(app) does not exist: nothing to halt") }
        // The app's lock first, as every release verb takes it before the repository's:
        // a verb committing a new manifest between this read of the manifest and the
        // write of rollout.json would leave the halt naming the replaced manifest, which
        // halts nothing.
        let appLock = try PublishLock(app: app, publishDirectory: out, wait: lockWait)
        let lock = try PublishLock(app: directoryName, publishDirectory: out, wait: lockWait)
        return try withExtendedLifetime((appLock, lock)) {
            try PublishRecovery.recover(app: app, publishDirectory: out)
            let role = haltRole(app)
            let keys = TUFKeys(snapshot: [snapshotKey ?? key], timestamp: [snapshotKey ?? key], delegated: [role: [key]])
            try checkKeys(publishDirectory: out, keys: keys)
            let appDirectory = "\(out)/\(app)"
            let manifest = try PublishFileWriter.digest(of: "\(appDirectory)/\(Publisher.manifestFile)").sha256
            guard let (role, version, _) = listing(of: "\(app)/\(Publisher.manifestFile)", in: metadataDirectory(out)) else {
                throw PublishError(.usage, "\(app)/\(Publisher.manifestFile) is not a target of the published metadata: nothing to halt")
            }
            let signed = currentChain(in: metadataDirectory(out)).snapshot?.meta["\(role).json"]
                .flatMap { FileManager.default.contents(atPath: "\(metadataDirectory(out))/\($0.version).\(role).json") }
                .flatMap { try? TUFTargets($0).metadata }
            PublishStep.afterRead.reached()
            if let current = rolloutStage(app: app, publishDirectory: out), current <= stage,
               let signed, !expiry.isDue("targets", expires: signed.expires, now: now) {
                return false
            }
            var fields: [String: StrictJSON] = [
                "app": .string(app), "manifest": .string(manifest), "role": .string(role), "version": .number(String(version)),
                "stage": .number(String(stage)),
            ]
            if let reason { fields["reason"] = .string(reason) }
            do {
                try FileSystem.writeAtomically(StrictJSON.object(fields).written(), to: "\(appDirectory)/\(TUFRollout.fileName)")
            } catch {
                throw PublishError(.publish, "cannot write the rollout file", path: "\(appDirectory)/\(TUFRollout.fileName)", underlying: error)
            }
            PublishStep.afterRolloutFile.reached()
            _ = try refreshLocked(out: out, keys: keys, now: now, expiry: expiry, delegations: nil)
            return true
        }
    }

    /// The stage `APP/rollout.json` narrows the app's current `manifest.json` to; nil when
    /// there is none, it is not the one the published metadata lists (a halt a crash cut
    /// short), or it names another manifest or listing (a later verb).
    public static func rolloutStage(app: String, publishDirectory: String) -> Int? {
        let out = FileSystem.absolute(publishDirectory), appDirectory = "\(out)/\(app)"
        guard let bytes = FileManager.default.contents(atPath: "\(appDirectory)/\(TUFRollout.fileName)"),
              listing(of: "\(app)/\(TUFRollout.fileName)", in: metadataDirectory(out))?.target.sha256 == SHA256.hash(data: bytes).hex,
              let rollout = try? TUFRollout(bytes), rollout.app == app,
              let manifest = try? PublishFileWriter.digest(of: "\(appDirectory)/\(Publisher.manifestFile)"), manifest.sha256 == rollout.manifest,
              let listed = listing(of: "\(app)/\(Publisher.manifestFile)", in: metadataDirectory(out)),
              listed.role == rollout.role, listed.version == rollout.version
        else { return nil }
        return rollout.stage
    }

    /// The published role whose metadata lists `path` (as a client's search finds it first),
    /// that metadata's version, and the target as listed.
    static func listing(of path: String, in directory: String) -> (role: String, version: Int64, target: TUFTargetFile)? {
        let chain = currentChain(in: directory)
        guard let targets = chain.targets else { return nil }
        if let target = targets.targets[path] { return ("targets", targets.metadata.version, target) }
        guard let role = targets.delegations?.roles(for: path).first, let version = chain.snapshot?.meta["\(role.name).json"]?.version,
              let bytes = FileManager.default.contents(atPath: "\(directory)/\(version).\(role.name).json"),
              let target = (try? TUFTargets(bytes))?.targets[path]
        else { return nil }
        return (role.name, version, target)
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
        var all: [(String, TUFMetadata?)] = [
            ("root", root), ("targets", chain.targets?.metadata), ("snapshot", chain.snapshot?.metadata), ("timestamp", chain.timestamp?.metadata),
        ]
        // Each app's delegated role, which lives as long as targets.
        for role in chain.targets?.delegations?.roles ?? [] {
            let metadata = chain.snapshot?.meta["\(role.name).json"]
                .flatMap { FileManager.default.contents(atPath: "\(directory)/\($0.version).\(role.name).json") }
                .flatMap { try? TUFTargets($0).metadata }
            all.append((role.name, metadata))
        }
        return all.compactMap { role, metadata in
            let lifetime = expiry.lifetime(TUFMetadata.topLevelRoles.contains(role) ? role : "targets")
            return metadata.map { TUFExpiryNotice(role: role, version: $0.version, expires: $0.expires, lifetime: lifetime, now: now) }
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
            // The halt role's rollout file, when one was written.
            if let rollout = try? PublishFileWriter.digest(of: "\(appDirectory)/\(TUFRollout.fileName)") {
                files.append((TUFRollout.fileName, TUFTargetFile(length: rollout.size, sha256: rollout.sha256)))
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
