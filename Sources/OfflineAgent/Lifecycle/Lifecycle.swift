import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// Trial installs, confirmation, rollback of bad versions and holds for the apps of
/// one store (the lifecycle record is `VersionLifecycle`).
///
/// A rollback is ordered so that `kill -9` at any instant leaves one consistent state:
/// 1. the version is recorded bad, with the rollback target, in one atomic write of
///    `lifecycle.json` — from then on it is never served offline nor installed again;
/// 2. `current` is switched to the target (atomic rename), when the root's lock can
///    be taken; otherwise, and after a crash between the two steps, `repair` (the
///    next sync or launch) completes it.
public struct Lifecycle: Sendable {
    /// The store whose apps this manages.
    public let store: Store

    /// The lifecycle of the apps in `store`.
    public init(store: Store) {
        self.store = store
    }

    /// `<root>/apps/<app>/lifecycle.json`, replaced atomically on every change.
    public func recordPath(_ app: String) -> String { "\(store.appDirectory(app))/lifecycle.json" }
    func lockPath(_ app: String) -> String { "\(store.appDirectory(app))/lifecycle.lock" }

    // MARK: - Reading (no lock: the record is replaced atomically)

    /// The record on disk; nil when there is none (a root from before the lifecycle:
    /// its active version is good) or it cannot be read.
    public func record(_ app: String) -> VersionLifecycle? {
        guard let data = FileManager.default.contents(atPath: recordPath(app)) else { return nil }
        return try? Store.decoder.decode(VersionLifecycle.self, from: data)
    }

    /// True when `version` of `app` is marked bad: it is not served offline.
    public func isBad(_ app: String, _ version: Version) -> Bool {
        record(app)?.isBad(version) ?? false
    }

    /// The lifecycle of `app` as it stands now.
    public func status(_ app: String) -> LifecycleStatus {
        let active = AppName.isValid(app) ? store.active(app)?.version : nil
        var record = (AppName.isValid(app) ? record(app) : nil) ?? VersionLifecycle(legacyActive: active)
        // An install not yet in the record (a crash right after the swap) reads as the
        // next lifecycle step will record it: with the trial its version record asked for.
        record.adopt(active, trialLaunches: active.flatMap { store.metadata(app, $0)?.trialLaunches }, at: Date())
        let state = active.map { record.state(of: $0) }
        return LifecycleStatus(
            app: app, version: active, state: state, launches: active.map { record.launches(of: $0) } ?? 0,
            maxTrialLaunches: state == .trial ? record.maxTrialLaunches ?? VersionLifecycle.defaultMaxTrialLaunches : 0,
            held: record.held, badVersions: record.bad, history: record.history)
    }

    // MARK: - Changing

    /// Reads, changes and writes the record under the app's lifecycle lock. A missing
    /// record starts as `VersionLifecycle(legacyActive:)`; an unreadable one is set
    /// aside (`lifecycle.json.corrupt-<time>`) and started afresh.
    @discardableResult
    func update<T>(_ app: String, _ body: (inout VersionLifecycle, Version?) throws -> T) throws -> T {
        guard AppName.isValid(app) else { throw OfflineAgentError(.usage, "invalid app name '\(app)'", cause: .usage) }
        guard FileSystem.isDirectory(store.appDirectory(app)) else {
            throw OfflineAgentError(
                .lifecycle, "no version of '\(app)' is installed in this root (offline-agent status lists its apps)",
                cause: .stateInvalid, path: store.appDirectory(app))
        }
        let lock = try LifecycleLock(path: lockPath(app))
        defer { withExtendedLifetime(lock) {} }
        let path = recordPath(app)
        let active = store.active(app)?.version
        var original: VersionLifecycle?
        if let data = FileManager.default.contents(atPath: path) {
            original = try? Store.decoder.decode(VersionLifecycle.self, from: data)
            if original == nil {
                _ = try? FileSystem.renameDurably(path, to: "\(path).corrupt-\(Int(Date().timeIntervalSince1970))")
            }
        }
        var record = original ?? VersionLifecycle(legacyActive: active)
        // An install's trial (or none) is written in its record before it becomes active,
        // so a crash between the swap and this write loses nothing.
        record.adopt(active, trialLaunches: active.flatMap { store.metadata(app, $0)?.trialLaunches }, at: Date())
        let history = record.history
        let result = try body(&record, active)
        if record != original {
            defer { queueReports(app, record.history, after: history) }
            // An app's first record, while nothing is active, holds nothing a crash could
            // lose; it only has to be on disk before a version becomes active (so that
            // install is adopted with its trial, not read as a legacy version), and the
            // install's `syncfs` flushes it before its swap: two fsyncs fewer per first sync.
            let empty = original == nil && active == nil && record == VersionLifecycle(legacyActive: nil)
            do {
                try FileSystem.writeAtomically(try Store.encoder.encode(record), to: path, durable: !empty)
            } catch let failure as POSIXFailure {
                throw OfflineAgentError(
                    .install, failure.errno == ENOSPC ? "disk full writing state" : "cannot write state",
                    cause: failure.errno == ENOSPC ? .diskFull : .io, path: path, underlying: failure)
            }
        }
        return result
    }

    /// The version a rollback from `active` goes to: the kept previous version, unless it is bad.
    func target(_ app: String, from active: Version, record: VersionLifecycle) -> Version? {
        guard let installed = store.metadata(app, active), let previous = installed.previousVersion,
              !record.isBad(previous), store.metadata(app, previous) != nil,
              FileSystem.isDirectory(store.versionDirectory(app, previous)) else { return nil }
        return previous
    }

    /// Confirms the active version of `app`; returns it. Whoever confirms should name the
    /// version it ran (`markGood(_:version:)`): a sync may have swapped another in since.
    ///
    /// - Throws: `.stateInvalid` when nothing is active or the active version is bad.
    @discardableResult
    public func markGood(_ app: String) throws -> Version {
        try confirm(app, version: nil)
    }

    /// Confirms `version` of `app`, only while it is the active version: a page (or host)
    /// speaks for the version it ran, never for one a sync swapped in since.
    ///
    /// - Throws: `.versionMismatch` (nothing changed) when `version` is not the active
    ///   version; `.stateInvalid` when nothing is active or it is bad.
    @discardableResult
    public func markGood(_ app: String, version: Version) throws -> Version {
        try confirm(app, version: version)
    }

    private func confirm(_ app: String, version expected: Version?) throws -> Version {
        try update(app) { record, active in
            guard let active else {
                throw OfflineAgentError(.lifecycle, "no active version of '\(app)' to confirm", cause: .stateInvalid)
            }
            if let expected, expected != active { throw Self.mismatch(app, expected, active: active, record: record) }
            guard !record.isBad(active) else {
                throw OfflineAgentError(
                    .lifecycle,
                    "\(app) \(active) is marked bad and not used offline; it cannot be confirmed (offline-agent forget-bad --app \(app) --version \(active) clears the mark)",
                    cause: .stateInvalid)
            }
            record.confirm(active, at: Date())
            return active
        }
    }

    /// Marks the active version of `app` bad (`mark-bad`); see `Agent.markBad(app:reason:)`.
    ///
    /// - Throws: `.stateInvalid` when no version, or only a bad one, is active.
    public func markBad(_ app: String, reason: String) throws -> LifecycleTransition {
        guard let transition = try rollBack(app, reason: reason, event: .markBad) else {
            throw OfflineAgentError(.lifecycle, "no active version of '\(app)' to mark bad (it may be marked bad already: offline-agent history --app \(app))", cause: .stateInvalid)
        }
        return transition
    }

    /// Marks `version` of `app` bad, only while it is the active version (not bad): a page
    /// (or host) reports the version it ran, never one a sync swapped in since.
    ///
    /// - Throws: `.versionMismatch` (nothing changed) when `version` is not the active
    ///   version or is bad already.
    public func markBad(_ app: String, version: Version, reason: String) throws -> LifecycleTransition {
        guard let transition = try rollBack(app, reason: reason, event: .markBad, expecting: version) else {
            let record = record(app) ?? VersionLifecycle(legacyActive: nil)
            throw Self.mismatch(app, version, active: store.active(app)?.version, record: record)
        }
        return transition
    }

    /// Why a version-bound step changed nothing: `version` is not what is active.
    static func mismatch(_ app: String, _ version: Version, active: Version?, record: VersionLifecycle) -> OfflineAgentError {
        let now: String
        if let active {
            now = record.isBad(active) ? "\(active) is active and marked bad" : "\(active) is active"
        } else {
            now = "no version is active"
        }
        let what = active == version ? "\(app) \(version) is marked bad already" : "\(app) \(version) is not the active version (\(now))"
        return OfflineAgentError(.lifecycle, "\(what): nothing changed; only the version a page runs may speak for itself", cause: .versionMismatch)
    }

    /// Marks the active version of `app` bad and switches to the previous good one
    /// (with none left, nothing of the app is served offline).
    ///
    /// - Parameters:
    ///   - expecting: act only when this is the active version (a launch decided on it).
    ///   - requireTarget: refuse (`.stateInvalid`) when there is no version to go back to.
    ///   - requireLock: throw `.busy` when another run holds the root's lock, instead of
    ///     recording the rollback and leaving the switch to the next launch or sync.
    /// - Returns: nil when `expecting` is no longer the active version.
    @discardableResult
    func rollBack(
        _ app: String, reason: String, event: LifecycleEvent.Kind, expecting: Version? = nil,
        requireTarget: Bool = false, requireLock: Bool = false
    ) throws -> LifecycleTransition? {
        guard AppName.isValid(app) else { throw OfflineAgentError(.usage, "invalid app name '\(app)'", cause: .usage) }
        var rootLock: RootLock?
        do {
            rootLock = try RootLock(root: store.root)
        } catch let error as OfflineAgentError where error.code == .busy && !requireLock {
            rootLock = nil
        }
        defer { withExtendedLifetime(rootLock) {} }
        let marked: (from: Version, to: Version?)? = try update(app) { record, active in
            guard let active, !record.isBad(active) else {
                if expecting != nil { return nil }
                throw OfflineAgentError(
                    .lifecycle, "no active version of '\(app)' to roll back from (offline-agent history --app \(app) shows what happened)",
                    cause: .stateInvalid)
            }
            if let expecting, expecting != active { return nil }
            let target = target(app, from: active, record: record)
            if requireTarget, target == nil {
                throw OfflineAgentError(
                    .lifecycle,
                    "nothing to roll back to: no previous version of '\(app)' is kept (or it is marked bad); \(active) stays active (offline-agent mark-bad --app \(app) stops serving it offline)",
                    cause: .stateInvalid)
            }
            record.markBad(active, target: target, event: event, reason: reason, at: Date())
            return (active, target)
        }
        guard let marked else { return nil }
        LifecycleCrashPoint.afterMarkBad.hit()
        var switched = marked.to == nil
        if rootLock != nil {
            switched = try finishRollback(app) || switched
        }
        return LifecycleTransition(app: app, from: marked.from, to: marked.to, switched: switched)
    }

    /// Completes a recorded rollback: when `current` names a bad version and its
    /// previous version is kept and not bad, switches to it. The caller holds the root's
    /// lock. Also starts the record of a root that has none. Returns true when it switched.
    @discardableResult
    public func repair(_ app: String) throws -> Bool {
        guard AppName.isValid(app), FileSystem.isDirectory(store.appDirectory(app)) else { return false }
        try update(app) { _, _ in }
        return try finishRollback(app)
    }

    private func finishRollback(_ app: String) throws -> Bool {
        guard let active = store.active(app)?.version, let record = record(app), record.isBad(active),
              let target = target(app, from: active, record: record), var targetRecord = store.metadata(app, target) else {
            return false
        }
        try store.activate(app, target)
        LifecycleCrashPoint.afterRollbackSwitch.hit()
        // The version left stays kept (a reader may hold it) but is no longer a rollback target.
        targetRecord.previousVersion = nil
        try store.updateRecord(targetRecord, app: app)
        // The cached ETag belongs to the version we left.
        var check = store.checkState(app)
        if check.etag != nil {
            check.etag = nil
            try store.saveCheckState(check, for: app)
        }
        return true
    }

    /// Counts one launch of `app`; a trial version that already used `limit` launches
    /// (the installing sync's `maxTrialLaunches` when nil) is rolled back first.
    ///
    /// - Parameter version: count only while this is the active version (the version the
    ///   launch loads); otherwise nothing is counted and the answer is `.versionChanged`.
    public func recordLaunch(_ app: String, version: Version? = nil, limit override: Int? = nil) throws -> LaunchOutcome {
        guard AppName.isValid(app), FileSystem.isDirectory(store.appDirectory(app)) else { return .notInstalled }
        let (decision, active, limit) = try update(app) { record, active -> (VersionLifecycle.LaunchDecision?, Version?, Int) in
            guard let active else { return (.bad, nil, 0) }
            if let version, version != active { return (nil, active, 0) }
            let limit = override ?? record.maxTrialLaunches ?? VersionLifecycle.defaultMaxTrialLaunches
            return (record.launch(active, limit: limit), active, limit)
        }
        guard let decision else { return .versionChanged }
        switch decision {
        case .confirmed:
            return .confirmed
        case .counted(let launches):
            return .counted(launches: launches, limit: limit)
        case .bad:
            // A rollback left unfinished (by a crash or a busy root) completes here.
            var switched = false
            if let lock = try? RootLock(root: store.root) {
                switched = (try? finishRollback(app)) ?? false
                withExtendedLifetime(lock) {}
            }
            // This launch is one of the version switched to.
            return switched ? try recordLaunch(app, limit: override) : .notInstalled
        case .rollBack:
            let reason = "not confirmed after \(limit) launch\(limit == 1 ? "" : "es")"
            guard let transition = try rollBack(app, reason: reason, event: .automaticRollback, expecting: active) else {
                // Another launch rolled it back first: count this one against what is active now.
                return try recordLaunch(app, limit: override)
            }
            return .rolledBack(transition)
        }
    }

    /// Holds or releases the active version of `app`; false when it already was so.
    @discardableResult
    public func setHeld(_ app: String, _ held: Bool) throws -> Bool {
        try update(app) { record, active in record.setHeld(held, active: active, at: Date()) }
    }

    /// Records the install a sync just made (its trial, if it asked for one, is in the
    /// version's record), so `history` and `status` show it at once.
    func recordInstall(_ app: String) throws {
        try update(app) { _, _ in }
    }

    /// Clears the bad mark of `version` of `app`, or of all its bad versions when nil
    /// (`forget-bad`): the operator's way out of a rollback. Syncs may install a cleared
    /// version again; an active one cleared is served again, as good. Recorded in `history`.
    ///
    /// - Returns: the versions cleared.
    /// - Throws: `.stateInvalid` when nothing (or not `version`) is marked bad.
    @discardableResult
    public func forgetBad(_ app: String, version: Version? = nil) throws -> [Version] {
        try update(app) { record, active in
            let cleared = record.forgetBad(version, active: active, at: Date())
            guard !cleared.isEmpty else {
                let what = version.map { "\(app) \($0) is not marked bad" } ?? "no version of '\(app)' is marked bad"
                throw OfflineAgentError(.lifecycle, what, cause: .stateInvalid)
            }
            return cleared
        }
    }

    /// Why a sync offered `offered` installs nothing: it is bad here, or the app is held.
    func refusal(_ app: String, offered: Version, installed: Version?) -> SyncResult? {
        let record = record(app)
        if record?.isBad(offered) == true { return .knownBad }
        if record?.held == true, offered != installed { return .held }
        return nil
    }
}
