import FoundationEssentials

/// What a sync does with a verified manifest, decided in one place from plain values
/// (`ManifestFacts`): refuse a downgrade, take the lifecycle's refusal, record a same
/// version, wait outside the stage, defer on a metered network, or install.
///
/// A pure function: what it needs from the disk, the device id or the system comes in
/// `ManifestFacts`, and a fact that costs something to learn (a file read, a process)
/// is asked for with `needs` only when the rules before it let the manifest through, so
/// the caller learns it, fills it in and decides again. The rules apply in this order
/// (docs/PROTOCOL.md):
/// 0. an epoch below the highest one the device accepted is refused (`epoch-rollback`):
///    a replay from before a recovery;
/// 1. an offered version below the installed one is refused (`downgrade`), unless the
///    manifest's epoch is above the one the installed version came with: comparing
///    (epoch, version), a recovery from a version published too high moves down;
/// 2. a version the lifecycle refuses (marked bad, or a held app) is not downloaded;
/// 3. a whitelist claiming an origin the device does not allow the app, or one another
///    installed app holds, is refused (`origin-not-allowed`, `origin-claimed`), even for
///    the installed version (its record would widen the claim);
/// 4. the installed version offered again rewrites its record (rollout, whitelist,
///    miniVersion), when the package is the same one;
/// 5. a staged rollout whose stage is below the device's bucket waits;
/// 6. a `wifi` manifest on a metered network waits;
/// 7. otherwise the version is installed.
enum ManifestDecision: Sendable {
    /// A fact the rules have reached and the caller has not filled in yet.
    enum Fact: Sendable, Equatable {
        /// `ManifestFacts.lifecycleRefusal`: asked once the manifest is no downgrade,
        /// when the caller also records what the manifest plans (it is trusted now).
        case lifecycleRefusal
        /// `ManifestFacts.originRefusal`: asked once the lifecycle lets the version through.
        case originClaim
        /// `ManifestFacts.bucket`: asked only when the stage in force can exclude a device.
        case bucket
        /// `ManifestFacts.network`: asked only for a `wifi` manifest.
        case network
    }

    /// Learn `Fact`, then decide again.
    case needs(Fact)
    /// The manifest's epoch is below the highest one accepted: a failure (cause `epoch-rollback`).
    case refuseEpoch(offered: Int, known: Int)
    /// The manifest offers `offered`, below `installed`: a failure (cause `downgrade`).
    case refuseDowngrade(offered: Version, installed: Version)
    /// The lifecycle refuses the offered version (`held`, `knownBad`): nothing downloaded.
    case refused(SyncResult)
    /// The whitelist claims an origin this app may not have: a failure, nothing downloaded.
    case originRefused(OfflineAgentError)
    /// The installed version's package under another hash: a failure (the manifest is wrong).
    case differentPackage(Version)
    /// The installed version again: its record, with the manifest's rollout, whitelist and miniVersion.
    case recordSameVersion(InstalledVersion)
    /// A staged rollout this device is not in yet: the stage in force and the device's bucket.
    case notInStage(stage: Int, bucket: Int)
    /// A `wifi` manifest on a metered network.
    case deferred
    /// Download and install the offered version.
    case install

    /// The decision for `facts`, or the next fact it needs.
    static func decide(_ facts: ManifestFacts) -> ManifestDecision {
        let manifest = facts.manifest
        if manifest.epoch < facts.knownEpoch {
            return .refuseEpoch(offered: manifest.epoch, known: facts.knownEpoch)
        }
        if let installed = facts.installed?.version, manifest.epoch <= facts.installedEpoch, manifest.version < installed {
            return .refuseDowngrade(offered: manifest.version, installed: installed)
        }
        guard let refusal = facts.lifecycleRefusal else { return .needs(.lifecycleRefusal) }
        if let refusal { return .refused(refusal) }
        guard let originRefusal = facts.originRefusal else { return .needs(.originClaim) }
        if let originRefusal { return .originRefused(originRefusal) }
        if var installed = facts.installed, manifest.version == installed.version {
            guard manifest.packageSha256 == installed.packageSha256 else { return .differentPackage(installed.version) }
            // Same package: the operator may have changed rollout, whitelist or miniVersion.
            installed.rollout = manifest.rollout
            installed.whitelist = manifest.whitelist
            installed.miniVersion = manifest.miniVersion
            return .recordSameVersion(installed)
        }
        // Every bucket is at most 100: the device id is read only when a stage can exclude it.
        let stage = manifest.currentStage(at: facts.now)
        if stage < 100 {
            guard let bucket = facts.bucket else { return .needs(.bucket) }
            if bucket > stage { return .notInStage(stage: stage, bucket: bucket) }
        }
        // The system is asked only when it matters (the auto policy runs a process per question).
        if manifest.networkType == .wifi {
            guard let network = facts.network else { return .needs(.network) }
            if network == .metered { return .deferred }
        }
        return .install
    }

    /// The ETag to send with the manifest request: the one stored, when it was obtained
    /// while the version installed now was (the server's answer depends on it).
    static func requestETag(_ check: CheckState, installed: Version?) -> String? {
        check.etagCurrent == (installed?.description ?? "") ? check.etag : nil
    }

    /// The epoch the installed version came with: the one recorded for it, else the
    /// highest accepted (a version the lifecycle rolled back to, or one installed before
    /// epochs: only a strictly higher epoch may then offer a lower version).
    static func installedEpoch(_ check: CheckState, installed: Version?) -> Int {
        if let installed, check.installedEpochVersion == installed.description, let epoch = check.installedEpoch { return epoch }
        return check.knownEpoch ?? 0
    }

    /// The check state to record once a manifest is trusted (before any download): its
    /// `miniVersion` holds from now on, whatever happens to the download, and no ETag is
    /// kept until the outcome is known, so a sync that ends without installing (outside
    /// the stage, deferred, failed) reads the manifest again next time: a schedule widens
    /// with time while the bytes (and their ETag) stay the same.
    ///
    /// A higher epoch is recorded now, so no replay from before it is accepted again; the
    /// installed version keeps the epoch it came with (a device outside the new epoch's
    /// stage still moves down later), and the new epoch's `miniVersion` replaces the old
    /// one (the old epoch's versions are not the measure of the new one's).
    static func planned(_ check: CheckState, manifest: Manifest, installed: Version?) -> CheckState {
        var check = check
        let known = check.knownEpoch ?? 0
        if manifest.epoch > known {
            if let installed {
                check.installedEpoch = installedEpoch(check, installed: installed)
                check.installedEpochVersion = installed.description
            }
            check.knownEpoch = manifest.epoch
            check.knownMiniVersion = manifest.miniVersion
        } else {
            check.knownMiniVersion = max(check.knownMiniVersion ?? manifest.miniVersion, manifest.miniVersion)
        }
        check.etag = nil
        return check
    }

    /// The check state once the offered version is the installed one (installed now, or
    /// its record rewritten): the answer's ETag is kept, tied to that version, and the
    /// version is recorded as of the manifest's epoch.
    static func settled(_ check: CheckState, etag: String?, current: Version, epoch: Int) -> CheckState {
        var check = check
        check.etag = etag
        check.etagCurrent = current.description
        check.installedEpoch = epoch
        check.installedEpochVersion = current.description
        return check
    }
}
