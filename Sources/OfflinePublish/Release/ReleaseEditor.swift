import Crypto
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import OfflineAgent

/// Changes a live release without building a new version (`stage`, `set`), or
/// publishes existing bytes as one (`revert`, `promote`).
///
/// Each verb holds the app's `PublishLock` from its read of `state.json` to its
/// commit (waiting at most `lockWait` for another verb, then `.busy` naming it),
/// re-signs `manifest.json` from the changed `state.json`, records a
/// `PublishRevision`, and commits through `PublishCommit` as `publish` does: on any
/// failure before the commit the publish directory is byte for byte as it was. Each refuses, before writing anything, what devices would refuse (an
/// expired manifest, a mini version above the version, a stage outside 0…100, an
/// unsigned or wrongly signed manifest where a signed one was), naming the value.
public enum ReleaseEditor {
    /// Sets the staged rollout of the latest version to `percent` (0 halts it: no new
    /// device takes the version; devices on it keep it), replacing any schedule.
    @discardableResult
    public static func stage(
        app: String, publishDirectory: String, percent: Int, key: SigningKey?, snapshotKey: SigningKey? = nil, reason: String? = nil,
        now: Date = Date(), lockWait: Duration = PublishLock.defaultWait
    ) throws -> PublishState {
        guard (0...100).contains(percent) else { throw usage("stage \(percent) is outside 0…100") }
        return try rewrite(app: app, publishDirectory: publishDirectory, key: key, snapshotKey: snapshotKey, now: now, verb: "stage", reason: reason, lockWait: lockWait) { state in
            let before = describeStage(state)
            state.stage = percent
            state.stageSchedule = nil
            return "stage \(before) -> \(percent)%" + (percent == 0 ? " (halted)" : "")
        }
    }

    /// The verb `halt` records in the revisions (`offline-publish history`).
    public static let haltVerb = "auto-halt"

    /// Halts the staged rollout of `version` (stage 0, as `stage` with 0 does), for
    /// `offline-server --auto-halt`: the same checks, re-signing and atomic write as
    /// `stage`, recorded as an `auto-halt` revision whose reason says which rule
    /// tripped on which figures.
    ///
    /// Refuses (`usage`) when `version` is no longer the latest or is not being staged
    /// any more (an operator or another server changed it since the figures were read),
    /// so a late halt never stops a newer version or undoes a resume.
    @discardableResult
    public static func halt(
        app: String, version: Version, publishDirectory: String, key: SigningKey?, reason: String, now: Date = Date(),
        lockWait: Duration = PublishLock.defaultWait
    ) throws -> PublishState {
        try rewrite(app: app, publishDirectory: publishDirectory, key: key, now: now, verb: haltVerb, reason: reason, lockWait: lockWait) { state in
            guard state.latest == version else {
                throw usage("version \(version) is no longer the latest (\(state.latest)): nothing halted")
            }
            guard state.isStaging(at: now) else {
                throw usage("version \(version) is not being staged (stage \(describeStage(state))): nothing halted")
            }
            let before = describeStage(state)
            state.stage = 0
            state.stageSchedule = nil
            return "stage \(before) -> 0% (halted)"
        }
    }

    /// Changes the app-wide settings of the live release.
    @discardableResult
    public static func set(
        app: String, publishDirectory: String, settings: ReleaseSettings, key: SigningKey?, snapshotKey: SigningKey? = nil,
        reason: String? = nil, now: Date = Date(), lockWait: Duration = PublishLock.defaultWait
    ) throws -> PublishState {
        guard !settings.isEmpty else {
            throw usage("nothing to set: give --rollout, --mini-version, --expires, --network-type, --whitelist or --fallback")
        }
        if let rollout = settings.rollout, !(0...100).contains(rollout) { throw usage("rollout \(rollout) is outside 0…100") }
        for prefix in settings.whitelist ?? [] where !WebAddress.isAbsolute(prefix) {
            throw usage("whitelist entry '\(prefix)' is not an absolute http(s) URL")
        }
        if let whitelist = settings.whitelist, whitelist.isEmpty { throw usage("an empty whitelist would serve nothing offline") }
        if case .at(let date) = settings.expires, date <= now {
            throw usage("expires \(RFC3339.string(from: date)) has already passed: no device would accept the manifest")
        }
        if let fallback = settings.fallback, !ManifestFields.isPackagePath(fallback) {
            throw usage("fallback '\(fallback)' must be a normalised relative path of a file in the package (like index.html)")
        }
        return try rewrite(app: app, publishDirectory: publishDirectory, key: key, snapshotKey: snapshotKey, now: now, verb: "set", reason: reason, lockWait: lockWait) { state in
            var changes: [String] = []
            if let rollout = settings.rollout {
                changes.append("rollout \(state.rollout) -> \(rollout)")
                state.rollout = rollout
            }
            if let miniVersion = settings.miniVersion {
                guard miniVersion <= state.latest else {
                    throw usage("mini version \(miniVersion) is above the latest version \(state.latest)")
                }
                changes.append("miniVersion \(state.miniVersion) -> \(miniVersion)")
                state.miniVersion = miniVersion
            }
            switch settings.expires {
            case .keep: break
            case .never:
                changes.append("expires \(state.expires ?? "never") -> never")
                state.expires = nil
            case .at(let date):
                let text = RFC3339.string(from: date)
                changes.append("expires \(state.expires ?? "never") -> \(text)")
                state.expires = text
            }
            if let networkType = settings.networkType {
                changes.append("networkType \(state.networkType.rawValue) -> \(networkType.rawValue)")
                state.networkType = networkType
            }
            if let whitelist = settings.whitelist {
                changes.append("whitelist -> \(whitelist.joined(separator: " "))")
                state.whitelist = whitelist
            }
            if let fallback = settings.fallback {
                try checkFileOfLatest(fallback, state: state, appDirectory: appDirectory(app, publishDirectory))
                changes.append("fallback \(state.fallback ?? "none") -> \(fallback)")
                state.fallback = fallback
            }
            return "set " + changes.joined(separator: ", ")
        }
    }

    /// Publishes the exact package of the earlier version `target` as a new version
    /// (`newVersion`, by default the next patch number after the latest), with patches
    /// from the last 3 versions: devices on the bad version move back with a small patch.
    ///
    /// With `newEpoch` the release goes to the next epoch and the new version may be below
    /// the latest (by default the next patch number after `target` that was never
    /// published): the recovery from a version published too high, which devices of the
    /// old epoch take although it is lower than theirs.
    @discardableResult
    public static func revert(
        app: String, publishDirectory: String, to target: Version, newVersion: Version? = nil, newEpoch: Bool = false, key: SigningKey?,
        snapshotKey: SigningKey? = nil, reason: String? = nil, now: Date = Date(), lockWait: Duration = PublishLock.defaultWait
    ) throws -> PublishResult {
        let directory = try appDirectory(app, publishDirectory)
        let state = try loadState(app, directory: directory, publishDirectory: publishDirectory)
        guard target != state.latest else { throw usage("version \(target) is the latest already: nothing to revert") }
        guard let release = state.versions.first(where: { $0.version == target }) else {
            throw usage("version \(target) was never published for \(app) in \(publishDirectory)")
        }
        let version = newVersion ?? (newEpoch ? nextUnpublished(after: target, in: state) : nextPatch(after: state.latest))
        if !newEpoch {
            guard version > state.latest else {
                throw usage("new version \(version) is not greater than the latest published \(state.latest)")
            }
        }
        try checkSigning(appDirectory: directory, key: key, snapshotKey: snapshotKey)
        try checkKeptExpiry(state, now: now)
        var options = PublishOptions(
            app: app, version: version, sourceDirectory: "", publishDirectory: publishDirectory, signingKey: key,
            baseURL: try baseURL(app: app, appDirectory: directory, state: state))
        options.snapshotKey = snapshotKey
        options.existingPackage = (path: "\(directory)/\(release.packageFile)", sha256: release.sha256)
        if newEpoch { options.epoch = state.epoch + 1 }
        options.verb = "revert"
        options.reason = PublishRevision.reason("the package of \(target)", reason)
        options.now = now
        options.lockWait = lockWait
        return try Publisher.publish(options)
    }

    /// Publishes the exact package of `version` from the publish directory `beta` into
    /// `publishDirectory` as its new latest version, with patches from that directory's
    /// last 3 versions. A first promotion takes the beta's whitelist, network type and
    /// fallback.
    @discardableResult
    public static func promote(
        app: String, version: Version, from beta: String, to publishDirectory: String, key: SigningKey?,
        snapshotKey: SigningKey? = nil, reason: String? = nil, now: Date = Date(), lockWait: Duration = PublishLock.defaultWait
    ) throws -> PublishResult {
        let betaDirectory = try appDirectory(app, beta)
        let directory = try appDirectory(app, publishDirectory)
        guard FileSystem.absolute(betaDirectory) != FileSystem.absolute(directory) else {
            throw usage("--from and --to are the same publish directory")
        }
        let betaState = try loadState(app, directory: betaDirectory, publishDirectory: beta)
        guard let release = betaState.versions.first(where: { $0.version == version }) else {
            throw usage("version \(version) was never published for \(app) in \(beta)")
        }
        let previous = FileSystem.isDirectory(directory) ? try PublishState.load(appDirectory: directory) : nil
        if let previous {
            guard version > previous.latest else {
                throw usage("version \(version) is not greater than the latest published \(previous.latest) in \(publishDirectory)")
            }
            try checkSigning(appDirectory: directory, key: key, snapshotKey: snapshotKey)
            try checkKeptExpiry(previous, now: now)
        }
        var options = PublishOptions(
            app: app, version: version, sourceDirectory: "", publishDirectory: publishDirectory,
            whitelist: previous == nil ? betaState.whitelist : nil,
            networkType: previous == nil ? betaState.networkType : nil, signingKey: key,
            baseURL: try previous.flatMap { try baseURL(app: app, appDirectory: directory, state: $0) },
            fallback: previous == nil ? betaState.fallback : nil)
        options.existingPackage = (path: "\(betaDirectory)/\(release.packageFile)", sha256: release.sha256)
        options.snapshotKey = snapshotKey
        options.verb = "promote"
        options.reason = PublishRevision.reason("from \(beta)", reason)
        options.now = now
        options.lockWait = lockWait
        return try Publisher.publish(options)
    }

    /// The versions and revisions of an app (`offline-publish history`).
    public static func history(app: String, publishDirectory: String) throws -> ReleaseHistory {
        let directory = try appDirectory(app, publishDirectory)
        let state = try loadState(app, directory: directory, publishDirectory: publishDirectory)
        return ReleaseHistory(state: state, stage: describeStage(state))
    }

    // MARK: The shared rewrite

    /// Under the app's lock, from the read of the state to its commit: repairs what a
    /// crash left, loads the state, applies `change` (which returns what changed), checks
    /// the result as a device would, then commits it with its re-signed manifest
    /// (`PublishCommit`).
    private static func rewrite(
        app: String, publishDirectory: String, key: SigningKey?, snapshotKey: SigningKey? = nil, now: Date, verb: String, reason: String?,
        lockWait: Duration, change: (inout PublishState) throws -> String
    ) throws -> PublishState {
        let directory = try appDirectory(app, publishDirectory)
        // Never creates a lock file for an app that does not exist.
        _ = try loadState(app, directory: directory, publishDirectory: publishDirectory)
        let lock = try PublishLock(app: app, publishDirectory: publishDirectory, wait: lockWait)
        return try withExtendedLifetime(lock) {
            try PublishRecovery.recover(app: app, publishDirectory: publishDirectory)
            var state = try loadState(app, directory: directory, publishDirectory: publishDirectory)
            PublishStep.afterRead.reached()
            try checkSigning(appDirectory: directory, key: key, snapshotKey: snapshotKey)
            let prefix = try fileURLPrefix(appDirectory: directory, state: state)
            var detail = try change(&state)
            // A halt by the app's halt key (rollout.json) stays a halt through the operator's
            // other verbs, now in the state; `stage` sets the stage itself.
            if verb != "stage", let halted = TUFRepository.rolloutStage(app: app, publishDirectory: publishDirectory),
               halted < state.stageInForce(at: now) {
                detail += ", stage \(describeStage(state)) -> \(halted)% (the halt key's)"
                state.stage = halted
                state.stageSchedule = nil
            }
            try checkKeptExpiry(state, now: now)
            state.revisions = PublishRevision.appending(
                PublishRevision(time: now, verb: verb, version: state.latest, reason: PublishRevision.reason(detail, reason)),
                to: state.revisions)
            do {
                try state.check(path: nil)
            } catch let error as PublishError {
                throw usage(error.reason)
            }
            guard let manifest = PublishManifest.manifest(from: state, current: nil, fileURLPrefix: prefix, fullCompression: .gzip, offerPatch: false) else {
                throw PublishError(.publish, "no release for \(state.latest)", path: directory)
            }
            do {
                try manifest.checkFields()
            } catch let error as OfflineAgentError {
                throw usage(error.reason)
            }
            let written = try PublishManifest.staticFiles(manifest, key: key)
            let staging: String
            do {
                staging = try FileSystem.makeTemporaryDirectory(in: directory, prefix: ".publish-")
            } catch {
                throw PublishError(.publish, "cannot write to the publish directory", path: directory, underlying: error)
            }
            var commit = PublishCommit(appDirectory: directory, staging: staging, state: state)
            commit.deriveStaticManifest(written)
            let committed = try commit.commit()
            // TUF: the changed manifest is a new target, so targets, snapshot and timestamp get new versions.
            if let key {
                let keys = TUFRepository.verbKeys(app: app, publishDirectory: publishDirectory, key: key, snapshotKey: snapshotKey)
                try TUFRepository.refresh(publishDirectory: publishDirectory, keys: keys, now: now, overriding: app)
            }
            return committed
        }
    }

    // MARK: Checks

    /// A signed release stays signed, by the key it was signed with: devices trusting
    /// that key refuse an unsigned manifest or another key's signature. An app delegated
    /// to its own key (`delegate`) is signed by that key from then on: the TUF check of
    /// the key is the one that counts (its devices trust a root, or the app key).
    static func checkSigning(appDirectory: String, key: SigningKey?, snapshotKey: SigningKey? = nil) throws {
        if let key {
            let publishDirectory = FileSystem.parent(of: appDirectory), app = (appDirectory as NSString).lastPathComponent
            let keys = TUFRepository.verbKeys(app: app, publishDirectory: publishDirectory, key: key, snapshotKey: snapshotKey)
            try TUFRepository.checkKeys(publishDirectory: publishDirectory, keys: keys)
            if !keys.delegated.isEmpty { return }
        }
        let path = "\(appDirectory)/\(Publisher.manifestFile)"
        guard let body = FileManager.default.contents(atPath: path) else { return }
        let envelope = try? ManifestEnvelope.open(body)
        let detached = FileManager.default.contents(atPath: "\(appDirectory)/\(Publisher.signatureFile)")
            .map { String(decoding: $0, as: UTF8.self) }
        let current: (signature: String, bytes: Data)?
        if let envelope, let signature = envelope.signature {
            current = (signature, envelope.manifest)
        } else if let detached {
            current = (detached, body)
        } else {
            current = nil
        }
        guard let current else { return }
        guard let key else {
            throw usage("\(path) is signed: give --key to re-sign it (devices that trust a key refuse an unsigned manifest)")
        }
        do {
            try ManifestSignature.verify(current.signature, of: current.bytes, with: key.key.publicKey)
        } catch {
            throw usage("--key is not the key \(path) is signed with (public key \(key.publicKeyBase64)): devices trusting the current key would refuse the manifest")
        }
    }

    /// A kept `expires` that has passed would publish a manifest every device refuses.
    private static func checkKeptExpiry(_ state: PublishState, now: Date) throws {
        if let expires = state.expires, let date = RFC3339.date(from: expires), date <= now {
            throw usage("expires \(expires) has already passed: no device would accept the manifest; give --expires with a later time, a duration like 7d, or never")
        }
    }

    /// The fallback must be a file of the latest package, or every deep link would fail.
    private static func checkFileOfLatest(_ fallback: String, state: PublishState, appDirectory: String) throws {
        guard let release = state.latestRelease else { return }
        let path = "\(appDirectory)/\(release.packageFile)"
        let names: [[UInt8]]
        do {
            names = try ZipCentralDirectory.rawNames(of: path)
        } catch {
            throw PublishError(.publish, "cannot read the package of \(release.version)", path: path)
        }
        guard names.contains(Array(fallback.utf8)) else {
            throw usage("fallback '\(fallback)' is not a file of the package of \(release.version)")
        }
    }

    // MARK: Helpers

    static func usage(_ reason: String) -> PublishError { PublishError(.usage, reason) }

    private static func appDirectory(_ app: String, _ publishDirectory: String) throws -> String {
        guard AppName.isValid(app) else { throw usage("invalid app name '\(app)' (expected [a-z0-9][a-z0-9._-]{0,63})") }
        try Publisher.checkNotAppDirectory(publishDirectory, option: "--out")
        return "\(FileSystem.absolute(publishDirectory))/\(app)"
    }

    private static func loadState(_ app: String, directory: String, publishDirectory: String) throws -> PublishState {
        guard FileSystem.isDirectory(directory), let state = try PublishState.load(appDirectory: directory) else {
            throw usage("app '\(app)' was never published in \(publishDirectory)")
        }
        guard state.app == app else { throw PublishError(.publish, "state.json belongs to app '\(state.app)'", path: directory) }
        return state
    }

    /// The prefix the current static manifest puts before file names (`publish
    /// --base-url`), read back from its `url` so a re-signed manifest keeps it.
    private static func fileURLPrefix(appDirectory: String, state: PublishState) throws -> String {
        guard let release = state.latestRelease,
              let body = FileManager.default.contents(atPath: "\(appDirectory)/\(Publisher.manifestFile)") else { return "" }
        let inner = (try? ManifestEnvelope.open(body))??.manifest ?? body
        guard let manifest = try? Manifest.decode(inner), manifest.url.hasSuffix(release.gzipFile) else { return "" }
        return String(manifest.url.dropLast(release.gzipFile.count))
    }

    /// `publish --base-url` as the current manifest used it, nil for relative URLs.
    private static func baseURL(app: String, appDirectory: String, state: PublishState) throws -> String? {
        let prefix = try fileURLPrefix(appDirectory: appDirectory, state: state)
        guard !prefix.isEmpty, prefix.hasSuffix("/\(app)/") else { return nil }
        return String(prefix.dropLast(app.count + 1))
    }

    /// The next patch number: `1.1.0` -> `1.1.1`, `2` -> `2.0.1`, `1.2.3.4` -> `1.2.3.5`.
    /// The next patch number after `version` that the state never published (each
    /// published one names files); bounded by the number of versions.
    static func nextUnpublished(after version: Version, in state: PublishState) -> Version {
        var candidate = nextPatch(after: version)
        for _ in state.versions where state.versions.contains(where: { $0.version == candidate }) {
            candidate = nextPatch(after: candidate)
        }
        return candidate
    }

    static func nextPatch(after version: Version) -> Version {
        var components = version.components
        while components.count < 3 { components.append(0) }
        components[components.count - 1] += 1
        return Version(components.map(String.init).joined(separator: ".")) ?? version
    }

    static func describeStage(_ state: PublishState) -> String {
        if let schedule = state.stageSchedule, !schedule.isEmpty { return "schedule " + ManifestStageStep.describe(schedule) }
        return "\(state.stage ?? 100)%"
    }
}
