import Foundation
#if canImport(Glibc)
import Glibc
import OfflineAgent
#endif

/// Builds a new version of an app into a publish directory: the stored package,
/// its gzip, BSDIFF40 patches from the last few versions, the static
/// `manifest.json` (+ `.sig`) and `state.json`.
///
/// Under the app's `PublishLock`, everything is made in a staging directory first;
/// the publish directory changes only once everything is built and checked, and then
/// through `PublishCommit`, whose one commit point is the rename of `state.json` (what
/// servers read): a failure or a crash before it leaves the old revision, after it the
/// new one (`PublishRecovery` finishes or undoes what a crash cut short).
public enum Publisher {
    /// The static manifest's file name inside the app directory.
    public static let manifestFile = "manifest.json"
    /// Its detached signature (base64), for hosts that cannot set headers.
    public static let signatureFile = "manifest.json.sig"

    /// Publishes `options.version`; waits at most `options.lockWait` for another verb on
    /// the app (`.busy` naming it after that).
    public static func publish(_ options: PublishOptions) throws -> PublishResult {
        try checkArguments(options)
        let out = FileSystem.absolute(options.publishDirectory)
        // TUF: a key the repository's root does not name is refused before anything is written.
        if let key = options.signingKey {
            try TUFRepository.checkKeys(
                publishDirectory: out, keys: TUFRepository.verbKeys(app: options.app, publishDirectory: out, key: key, snapshotKey: options.snapshotKey))
        }
        let source = FileSystem.absolute(options.sourceDirectory)
        let appDirectory = "\(out)/\(options.app)"
        try checkNotAppDirectory(out, option: "--out")
        // Before anything is written: a tree devices would refuse changes nothing.
        let entries = options.existingPackage == nil ? try PublishZip.collect(source: source, limits: options.limits) : []

        // Stage on the publish directory's filesystem so moving in is a rename.
        let createdOut = try makeDirectories(out)
        do {
            let lock = try PublishLock(app: options.app, publishDirectory: out, wait: options.lockWait)
            return try withExtendedLifetime(lock) {
                try PublishRecovery.recover(app: options.app, publishDirectory: out)
                return try publishLocked(options, entries: entries, out: out, appDirectory: appDirectory)
            }
        } catch {
            if !createdOut.isEmpty {
                // Nothing was published into the directories made above: they go again.
                unlink(PublishLock.path(app: options.app, publishDirectory: out))
                removeCreated(createdOut)
            }
            // The boundary with the engine library: its failures leave as the publisher's.
            if let error = error as? OfflineAgentError { throw PublishError(error) }
            throw error
        }
    }

    /// The read-modify-write of a publish, under the app's lock.
    private static func publishLocked(
        _ options: PublishOptions, entries: [PublishZip.Entry], out: String, appDirectory: String
    ) throws -> PublishResult {
        let previous = try FileSystem.isDirectory(appDirectory) ? PublishState.load(appDirectory: appDirectory) : nil
        PublishStep.afterRead.reached()
        if let previous {
            guard previous.app == options.app else {
                throw PublishError(.publish, "state.json belongs to app '\(previous.app)'", path: appDirectory)
            }
            try checkEpoch(options, previous: previous)
            // Keeping an expiry that has passed since would publish a manifest every device rejects.
            if options.expires == .keep, let kept = previous.expires, let date = RFC3339.date(from: kept), date <= Date() {
                throw PublishError(
                    .usage, "the kept expires \(kept) has already passed: no device would accept the manifest; give --expires with a later time or 'never'")
            }
        }
        let staging: String
        do {
            staging = FileSystem.isDirectory(appDirectory)
                ? try FileSystem.makeTemporaryDirectory(in: appDirectory, prefix: ".publish-")
                : try FileSystem.makeTemporaryDirectory(in: out, prefix: ".publish-\(options.app)-")
        } catch {
            throw PublishError(.publish, "cannot write to the publish directory", path: out, underlying: error)
        }
        let commit: PublishCommit
        do {
            commit = try build(options, entries: entries, previous: previous, appDirectory: appDirectory, staging: staging)
        } catch {
            FileSystem.remove(staging)
            if let error = error as? PublishError { throw error }
            // The engine's own failures (a patch that does not apply, a manifest rule) met while building.
            if let error = error as? OfflineAgentError { throw PublishError(error) }
            throw PublishError(.publish, "cannot write to the publish directory", path: appDirectory, underlying: error)
        }
        let state = try commit.commit()
        // TUF: the new files become targets; timestamp.json, written last, publishes them.
        // After the commit point: a crash before it ends leaves metadata a refresh behind,
        // which the next verb (or `offline-publish timestamp`) brings up to date.
        if let key = options.signingKey {
            let keys = TUFRepository.verbKeys(app: options.app, publishDirectory: out, key: key, snapshotKey: options.snapshotKey)
            try TUFRepository.refresh(publishDirectory: out, keys: keys, now: options.now)
        }
        return PublishResult(
            appDirectory: appDirectory, state: state, release: state.latestRelease!, patches: state.patches,
            manifestPath: "\(appDirectory)/\(manifestFile)",
            signaturePath: options.signingKey == nil ? nil : "\(appDirectory)/\(signatureFile)")
    }

    /// The version rule with epochs: in the same epoch the version must rise; a higher
    /// epoch may go to any version not published yet; the epoch never goes down.
    static func checkEpoch(_ options: PublishOptions, previous: PublishState) throws {
        let epoch = options.epoch ?? previous.epoch
        guard (0...Manifest.maxEpoch).contains(epoch) else { throw PublishError(.usage, "epoch \(epoch) is outside 0…\(Manifest.maxEpoch)") }
        guard epoch >= previous.epoch else {
            throw PublishError(.usage, "epoch \(epoch) is below the latest release's epoch \(previous.epoch): devices refuse a lower epoch (epoch-rollback)")
        }
        if epoch == previous.epoch {
            guard options.version > previous.latest else {
                let hint = options.version < previous.latest
                    ? "; to move devices down from \(previous.latest), publish with --epoch \(previous.epoch + 1) (docs/PUBLISHING.md, \"Recovering from a version published too high\")"
                    : ""
                throw PublishError(.publish, "version \(options.version) is not greater than the latest published \(previous.latest)\(hint)")
            }
        } else if previous.versions.contains(where: { $0.version == options.version }) {
            throw PublishError(.usage, "version \(options.version) was published already: a new epoch needs a version not published before")
        }
    }

    /// The kept miniVersion; a new epoch that goes below it takes its own version as the
    /// floor (the old epoch's kill switch is no measure of the new one's versions).
    private static func keptMiniVersion(_ previous: PublishState, version: Version, epoch: Int) -> Version {
        epoch > previous.epoch && previous.miniVersion > version ? version : previous.miniVersion
    }

    // MARK: Steps

    /// Writes every new immutable file into `staging` and returns the commit of the new
    /// state with its static manifest.
    private static func build(
        _ options: PublishOptions, entries: [PublishZip.Entry], previous: PublishState?,
        appDirectory: String, staging: String
    ) throws -> PublishCommit {
        let version = options.version
        let package: PublishedFile
        if let existing = options.existingPackage {
            // revert and promote: the exact bytes devices already verified once.
            package = try copyPackage(existing, to: "\(staging)/\(version).zip")
        } else {
            package = try PublishZip.write(entries, to: "\(staging)/\(version).zip")
        }
        let gzip = try PublishGzip.compress("\(staging)/\(version).zip", to: "\(staging)/\(version).zip.gz")
        var release = PublishState.Release(
            version: version, size: package.size, sha256: package.sha256, gzipSize: gzip.size, gzipSha256: gzip.sha256,
            trialLaunches: (options.trialLaunches ?? 0) > 0 ? options.trialLaunches : nil)
        let epoch = options.epoch ?? previous?.epoch ?? 0
        release.epoch = epoch > 0 ? epoch : nil
        var files = [release.packageFile, release.gzipFile]

        var patches: [PublishState.Patch] = []
        // A patch goes up from its base: after a new epoch's lower version, from the lower bases only.
        for base in (previous?.versions ?? []).suffix(max(0, options.patchBaseCount)) where base.version < version {
            let patch = try makePatch(from: base, to: release, appDirectory: appDirectory, staging: staging)
            patches.append(patch)
            files.append(patch.file)
        }

        let expires: String? = switch options.expires {
        case .keep: previous?.expires
        case .never: nil
        case .at(let date): RFC3339.string(from: date)
        }

        var state = PublishState(
            app: options.app, latest: version,
            miniVersion: options.miniVersion ?? previous.map { keptMiniVersion($0, version: version, epoch: epoch) } ?? version,
            whitelist: options.whitelist ?? previous?.whitelist ?? [],
            rollout: options.rollout ?? previous?.rollout ?? 100,
            networkType: options.networkType ?? previous?.networkType ?? .any,
            expires: expires,
            versions: (previous?.versions ?? []) + [release],
            patches: patches,
            fallback: options.fallback ?? previous?.fallback)
        if options.requireWhitelist, state.whitelist.isEmpty {
            throw PublishError(
                .usage,
                "no whitelist: devices would install \(options.app) \(version) and serve none of it; give --whitelist URL_PREFIX (e.g. https://h5.example.com/\(options.app)/), repeated for several")
        }
        // A new version starts its own rollout: the stage is never kept from the last one.
        state.publishedAt = RFC3339.string(from: options.now)
        state.stage = options.stageSchedule == nil ? options.stage : nil
        state.stageSchedule = options.stageSchedule
        let detail = options.verb == "publish" ? "published \(version)" : "\(options.verb) \(version)"
        state.revisions = PublishRevision.appending(
            PublishRevision(time: options.now, verb: options.verb, version: version, reason: PublishRevision.reason(detail, options.reason)),
            to: previous?.revisions)
        // The entry page must be a file of this very package, or every deep link would fail.
        if options.existingPackage == nil, let fallback = state.fallback, !entries.contains(where: { $0.name == fallback }) {
            throw PublishError(.usage, "fallback '\(fallback)' is not a file of the package")
        }
        if options.requireEntryPage, options.existingPackage == nil, state.fallback == nil, !entries.contains(where: { $0.name == "index.html" }) {
            throw missingEntryPage(options, entries: entries)
        }
        guard state.miniVersion <= version else {
            throw PublishError(.usage, "miniVersion \(state.miniVersion) is above version \(version)")
        }
        try state.check(path: nil)

        // The static form: the full package, gzip-compressed, described beside it.
        let prefix = options.baseURL.map { "\($0.hasSuffix("/") ? String($0.dropLast()) : $0)/\(options.app)/" } ?? ""
        guard let manifest = PublishManifest.manifest(from: state, current: nil, fileURLPrefix: prefix, fullCompression: .gzip, offerPatch: false) else {
            throw PublishError(.publish, "no release for \(version)")
        }
        do {
            try manifest.checkFields()
        } catch let error as OfflineAgentError where error.cause == .manifestInvalid {
            // A manifest devices would refuse (a bad schedule, stage): the operator's input.
            throw PublishError(.usage, error.reason)
        }
        var commit = PublishCommit(appDirectory: appDirectory, staging: staging, state: state)
        commit.files = files
        commit.deriveStaticManifest(try PublishManifest.staticFiles(manifest, key: options.signingKey))
        return commit
    }

    /// Diffs the kept package of `base` against the new one, then proves the patch
    /// by applying it: a patch that does not rebuild the package byte for byte is
    /// never published.
    private static func makePatch(
        from base: PublishState.Release, to release: PublishState.Release, appDirectory: String, staging: String
    ) throws -> PublishState.Patch {
        let old = "\(appDirectory)/\(base.packageFile)"
        guard let found = try? PublishFileWriter.digest(of: old), found == PublishedFile(size: base.size, sha256: base.sha256) else {
            throw PublishError(.publish, "the kept package of \(base.version) is missing or does not match state.json", path: old)
        }
        let new = "\(staging)/\(release.packageFile)"
        let name = PublishState.Patch(from: base.version, to: release.version, size: 0, sha256: "").file
        let path = "\(staging)/\(name)"
        try Differ.makePatch(from: URL(fileURLWithPath: old), to: URL(fileURLWithPath: new), writingTo: URL(fileURLWithPath: path))

        let check = "\(staging)/.check-\(name)"
        defer { unlink(check) }
        try Patcher.apply(
            old: URL(fileURLWithPath: old), patch: URL(fileURLWithPath: path), to: URL(fileURLWithPath: check),
            expectedSize: release.size)
        guard try PublishFileWriter.digest(of: check).sha256 == release.sha256 else {
            throw PublishError(.publish, "the patch from \(base.version) does not rebuild the package", path: path)
        }
        let digest = try PublishFileWriter.digest(of: path)
        return PublishState.Patch(from: base.version, to: release.version, size: digest.size, sha256: digest.sha256)
    }

    // MARK: Helpers

    /// Refuses a publish directory that is itself an app's directory (it holds
    /// `state.json`): `--out pub/mall` where `--out pub` was meant would start a second,
    /// nested publish directory that no device's manifest URL points at.
    package static func checkNotAppDirectory(_ directory: String, option: String) throws {
        let path = FileSystem.absolute(directory)
        guard FileSystem.exists("\(path)/\(PublishState.fileName)") else { return }
        let app = (try? PublishState.load(appDirectory: path))?.map(\.app) ?? FileSystem.name(of: path)
        throw PublishError(
            .usage,
            "\(option) \(directory) is the directory of app '\(app)' (it holds \(PublishState.fileName)), not a publish directory: give the directory above it (\(option) \(FileSystem.parent(of: path)))")
    }

    /// The refusal of a source without an entry page: it names what the source's top
    /// level holds, which is usually the sign of the wrong directory (a wheel's root, a
    /// project's root instead of its build output).
    private static func missingEntryPage(_ options: PublishOptions, entries: [PublishZip.Entry]) -> PublishError {
        let top = Set(entries.map { name in
            name.name.split(separator: "/", maxSplits: 1).count > 1 ? "\(name.name.split(separator: "/")[0])/" : name.name
        }).sorted()
        let shown = top.prefix(5).joined(separator: ", ") + (top.count > 5 ? ", … (\(top.count) in all)" : "")
        return PublishError(
            .usage,
            "\(options.sourceDirectory) has no index.html at its root (it holds \(top.isEmpty ? "nothing" : shown)): is --source the built site's root? Give --fallback FILE when the entry page has another name, or --no-entry-page to publish it without one",
            path: options.sourceDirectory)
    }

    private static func checkArguments(_ options: PublishOptions) throws {
        func usage(_ reason: String, path: String? = nil) -> PublishError { PublishError(.usage, reason, path: path) }
        guard AppName.isValid(options.app) else { throw usage("invalid app name '\(options.app)' (expected [a-z0-9][a-z0-9._-]{0,63})") }
        if let stage = options.stage, !(0...100).contains(stage) { throw usage("stage \(stage) is outside 0…100") }
        if options.stage != nil, options.stageSchedule != nil { throw usage("--stage and --stage-schedule cannot both be given") }
        if let schedule = options.stageSchedule, let problem = ManifestStageStep.problem(in: schedule) {
            throw usage("--stage-schedule \(ManifestStageStep.describe(schedule)): \(problem)")
        }
        guard options.existingPackage != nil || FileSystem.isDirectory(options.sourceDirectory) else {
            throw usage("source directory does not exist or is not a directory", path: options.sourceDirectory)
        }
        if let rollout = options.rollout, !(0...100).contains(rollout) { throw usage("rollout \(rollout) is outside 0…100") }
        if let miniVersion = options.miniVersion, miniVersion > options.version {
            throw usage("miniVersion \(miniVersion) is above version \(options.version)")
        }
        for prefix in options.whitelist ?? [] where !WebAddress.isAbsolute(prefix) {
            throw usage("whitelist entry '\(prefix)' is not an absolute http(s) URL")
        }
        if let baseURL = options.baseURL, !WebAddress.isAbsolute(baseURL) {
            throw usage("base URL '\(baseURL)' is not an absolute http(s) URL")
        }
        guard options.patchBaseCount >= 0 else { throw usage("negative patch count") }
        if let trial = options.trialLaunches, !(0...Manifest.maxTrialLaunches).contains(trial) {
            throw usage("--trial-launches \(trial) is outside 0…\(Manifest.maxTrialLaunches)")
        }
        if let fallback = options.fallback, !ManifestFields.isPackagePath(fallback) {
            throw usage("fallback '\(fallback)' must be a normalised relative path of a file in the package (like index.html)")
        }
        // Every device rejects a manifest whose expiry has passed: publishing one would strand them all.
        if case .at(let date) = options.expires, date <= Date() {
            throw usage("expires \(RFC3339.string(from: date)) has already passed: no device would accept the manifest")
        }
    }

    /// Copies an existing package into staging, refusing bytes that are not the ones
    /// the source's state names.
    private static func copyPackage(_ existing: (path: String, sha256: String), to path: String) throws -> PublishedFile {
        let writer = try PublishFileWriter(creating: path)
        guard let input = FileHandle(forReadingAtPath: existing.path) else {
            throw PublishError(.publish, "cannot read the package", path: existing.path)
        }
        defer { try? input.close() }
        while let chunk = try input.read(upToCount: 1 << 20), !chunk.isEmpty {
            try writer.write(chunk)
        }
        let copied = try writer.finish()
        guard copied.sha256 == existing.sha256 else {
            throw PublishError(.publish, "the package does not match its state.json (sha256 \(copied.sha256), expected \(existing.sha256))", path: existing.path)
        }
        return copied
    }

    /// `mkdir -p`, returning the directories it created (outermost first) so a
    /// failed first publish can take them away again.
    private static func makeDirectories(_ path: String) throws -> [String] {
        var missing: [String] = []
        var current = path
        while !FileSystem.exists(current), current != "/" {
            missing.append(current)
            current = FileSystem.parent(of: current)
        }
        guard FileSystem.isDirectory(current) else {
            throw PublishError(.publish, "cannot create the publish directory: not a directory", path: current)
        }
        var created: [String] = []
        for dir in missing.reversed() {
            guard mkdir(dir, 0o755) == 0 else {
                removeCreated(created)
                throw PublishError(.publish, "cannot create the publish directory", path: dir, underlying: POSIXFailure("mkdir"))
            }
            created.append(dir)
        }
        return created
    }

    private static func removeCreated(_ created: [String]) {
        for dir in created.reversed() { rmdir(dir) }
    }
}
