import Crypto
import FoundationEssentials
import Logging

/// Keeps the offline packages under one root current and answers which file serves a URL.
///
/// ```swift
/// let agent = Agent(root: URL(fileURLWithPath: "/var/lib/offline-agent"))
/// let report = await agent.sync(app: "mall", manifest: URL(string: "https://h5.example.com/manifest")!)
/// if case .file(let file) = await agent.resolve(URL(string: "https://h5.example.com/mall/index.html")!) {
///     print(file.path)
/// }
/// ```
/// Every sync takes the root's lock, so several agents (or processes) over one root
/// are safe: the second finds it busy. Failures leave the installed version untouched.
public actor Agent {
    public nonisolated let store: Store
    public nonisolated let configuration: AgentConfiguration
    /// Progress of every sync this agent runs.
    public nonisolated let events: AsyncStream<ProgressEvent>
    private let continuation: AsyncStream<ProgressEvent>.Continuation
    private let logger: Logger

    public init(root: URL, configuration: AgentConfiguration = AgentConfiguration(), logger: Logger = Logger(label: "offline-agent")) {
        self.store = Store(root: root.path)
        self.configuration = configuration
        self.logger = logger
        (events, continuation) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(256))
    }

    deinit { continuation.finish() }

    // MARK: - Sync

    /// Checks `manifest` for a newer version of `app` and installs it.
    ///
    /// Never throws: a failure is reported with `result == .failed` and its error, and
    /// leaves the active version as it was. A busy root reports `.busy` as the error code.
    public func sync(app: String, manifest manifestURL: URL, options: SyncOptions = SyncOptions()) async -> SyncReport {
        await sync(app: app, manifestURL: manifestURL, options: options, session: nil)
    }

    /// Syncs several apps of this root, at most `concurrency` at a time, so N dead servers
    /// cost about N / `concurrency` deadlines instead of N. The root's lock is taken once,
    /// by the first app that gets past its throttle, and held until the batch ends.
    ///
    /// - Returns: one report per request, in the order of `requests`.
    public func sync(_ requests: [SyncRequest], concurrency: Int = 4) async -> [SyncReport] {
        let session = SyncSession(root: store.root)
        return await withTaskGroup(of: (Int, SyncReport).self) { group in
            var reports = [SyncReport?](repeating: nil, count: requests.count)
            var next = 0
            func startNext() {
                guard next < requests.count else { return }
                let index = next, request = requests[index]
                next += 1
                group.addTask {
                    (index, await self.sync(app: request.app, manifestURL: request.manifest, options: request.options, session: session))
                }
            }
            for _ in 0..<max(1, concurrency) { startNext() }
            while let (index, report) = await group.next() {
                reports[index] = report
                startNext()
            }
            return reports.enumerated().map { index, report in
                report ?? SyncReport(app: requests[index].app, result: .failed, error: OfflineAgentError(.install, "not run", cause: .unexpected))
            }
        }
    }

    private func sync(app: String, manifestURL: URL, options: SyncOptions, session: SyncSession?) async -> SyncReport {
        let before = AppName.isValid(app) ? store.active(app) : nil
        var report = SyncReport(app: app, result: .failed, version: before?.version, previousVersion: before?.version)
        do {
            try await run(app: app, manifestURL: manifestURL, options: options, session: session, report: &report)
        } catch let error as OfflineAgentError {
            report.result = .failed
            report.error = error
            report.version = AppName.isValid(app) ? store.active(app)?.version : nil
            // The caller reports the failure (the CLI prints one line); this is detail for --verbose.
            if error.code == .busy {
                logger.info("\(app): \(error)")
            } else {
                logger.notice("\(app): \(error)")
            }
        } catch {
            report.result = .failed
            report.error = OfflineAgentError(.install, "unexpected failure: \(error)", cause: .unexpected)
        }
        continuation.yield(ProgressEvent(app: app, phase: .done, completed: 0, total: 0))
        return report
    }

    private func run(app: String, manifestURL: URL, options: SyncOptions, session: SyncSession?, report: inout SyncReport) async throws {
        guard AppName.isValid(app) else { throw OfflineAgentError(.usage, "invalid app name '\(app)'") }
        let publicKeys = try options.trustedKeys.map(ManifestSignature.publicKey(base64:))
        let profile = try CookieProfile(root: store.root, name: options.profile)
        let now = configuration.clock()
        let throttle = configuration.throttle
        // Fast path without the lock: a throttled no-op is what cron runs most. State a
        // wrong clock left behind is repaired under the lock first, so a clamp cannot slide.
        let stored = store.checkState(app)
        let backoff = BackoffState.load(store, app: app)
        let policy = configuration.backoff
        let needsRepair = throttle.sanitized(stored, now: now) != stored
        if let next = throttle.nextCheck(after: stored, backoff: backoff, policy: policy, now: now, force: options.force), !needsRepair {
            report.result = .throttled
            report.nextCheck = next
            return
        }
        try store.prepare(app)
        let lock: RootLock
        do {
            lock = try session?.lock() ?? RootLock(root: store.root)
        } catch let error as OfflineAgentError where error.code == .busy && needsRepair {
            // Only the repair needed the lock; the other run will see the same state.
            if let next = throttle.nextCheck(after: stored, backoff: backoff, policy: policy, now: now, force: options.force) {
                report.result = .throttled
                report.nextCheck = next
                return
            }
            throw error
        }
        defer { withExtendedLifetime(lock) {} }
        let recorded = store.checkState(app)
        var check = throttle.sanitized(recorded, now: now)
        if check != recorded { try store.saveCheckState(check, for: app) }
        // Another process may have checked while we waited for nothing: look again under the lock.
        let failures = BackoffState.load(store, app: app)
        if let next = throttle.nextCheck(after: check, backoff: failures, policy: policy, now: now, force: options.force) {
            report.result = .throttled
            report.nextCheck = next
            return
        }
        store.cleanLeftovers(app)
        // Finish a rollback a crash or a busy root left half done, before deciding anything.
        try Lifecycle(store: store).repair(app)
        store.collectDownloads(app, plan: nil)
        let installed = store.active(app)
        report.previousVersion = installed?.version
        report.version = installed?.version
        if installed == nil, store.isInconsistent(app) {
            logger.warning("\(app): recorded version disagrees with the disk; repairing with a full install")
        }
        check.lastCheck = now
        try store.saveCheckState(check, for: app)

        continuation.yield(ProgressEvent(app: app, phase: .checking, completed: 0, total: 0))
        let (cookies, warning) = session?.jar(profile, now: now) ?? profile.open(now: now)
        if let warning { logger.warning("\(app): \(warning)") }
        let fetcher = HTTPFetcher(settings: configuration.network, cookies: cookies, logger: logger)
        do {
            try await update(app: app, manifestURL: manifestURL, installed: installed, check: check,
                             publicKeys: publicKeys, options: options, now: now, fetcher: fetcher, report: &report)
        } catch {
            await fetcher.shutdown()
            // Consecutive failed checks wait longer and longer (a forced sync too: it failed).
            let count = (failures?.failures ?? 0) + 1
            let next = now.addingTimeInterval(policy.delay(failures: count, spread: Double.random(in: -1...1)))
            try? BackoffState(failures: count, nextCheck: next).save(store, app: app)
            // The 5-minute throttle holds as well, whichever ends later.
            report.nextCheck = max(next, now.addingTimeInterval(throttle.interval))
            throw error
        }
        await fetcher.shutdown()
        if failures != nil { BackoffState.clear(store, app: app) }
    }

    /// The network part of a sync: manifest, rules, and the update itself.
    private func update(
        app: String, manifestURL: URL, installed: InstalledVersion?, check: CheckState,
        publicKeys: [Curve25519.Signing.PublicKey], options: SyncOptions, now: Date, fetcher: HTTPFetcher,
        report: inout SyncReport
    ) async throws {
        var check = check
        let client = ManifestClient(fetcher: fetcher, publicKeys: publicKeys)
        let etag = check.etagCurrent == (installed?.version.description ?? "") ? check.etag : nil
        let response: ManifestResponse
        do {
            response = try await client.fetch(base: manifestURL, app: app, current: installed?.version, etag: etag, now: now)
        } catch {
            // The answer we cached an ETag for may be gone: ask afresh next time.
            check.etag = nil
            try? store.saveCheckState(check, for: app)
            throw error
        }
        if case .retryAfter = response {} else if check.notBefore != nil {
            // The server answered (a forced check past its Retry-After): its wish is spent.
            check.notBefore = nil
            try store.saveCheckState(check, for: app)
        }
        let manifest: Manifest
        let newETag: String?
        switch response {
        case .notModified:
            report.result = .upToDate
            return
        case .retryAfter(let until):
            check.notBefore = min(until, now.addingTimeInterval(Throttle.maxAhead))
            try store.saveCheckState(check, for: app)
            report.result = .throttled
            report.nextCheck = until
            return
        case .manifest(let value, let etag):
            manifest = value
            newETag = etag
        }
        if let installed {
            guard manifest.version >= installed.version else {
                throw OfflineAgentError(.manifest, "manifest offers \(manifest.version), below installed \(installed.version) (downgrade refused)", cause: .downgrade)
            }
        }
        CrashPoint.afterManifest.hit()
        store.collectDownloads(app, plan: manifest, manifestURL: manifestURL, installed: installed?.version)
        // A trusted manifest's miniVersion holds from now on, whatever happens to the download.
        check.knownMiniVersion = max(check.knownMiniVersion ?? manifest.miniVersion, manifest.miniVersion)
        check.etag = nil
        try store.saveCheckState(check, for: app)

        // A version marked bad here is never installed again; a held app keeps its version.
        if let refusal = Lifecycle(store: store).refusal(app, offered: manifest.version, installed: installed?.version) {
            report.result = refusal
            return
        }
        if var installed, manifest.version == installed.version {
            guard manifest.packageSha256 == installed.packageSha256 else {
                throw OfflineAgentError(.manifest, "manifest describes a different package for installed version \(installed.version)")
            }
            // Same package: the operator may have changed rollout, whitelist or miniVersion.
            installed.rollout = manifest.rollout
            installed.whitelist = manifest.whitelist
            installed.miniVersion = manifest.miniVersion
            try store.updateRecord(installed, app: app)
            try saveETag(newETag, current: installed.version, check: &check, app: app)
            report.result = .upToDate
            return
        }
        if manifest.networkType == .wifi, options.network == .metered {
            report.result = .deferred
            return
        }
        let counter = ByteCounter()
        let updater = Updater(
            store: store, app: app, manifest: manifest, manifestURL: manifestURL, installed: installed,
            fetcher: fetcher, configuration: configuration, logger: logger, continuation: continuation, counter: counter)
        // A failed sync reports what it downloaded too (a partial file, a patch and a full).
        defer { report.bytesDownloaded = counter.value }
        let outcome = try await updater.run()
        report.patchFallbackReason = outcome.patchFallbackReason
        report.via = outcome.installed.via
        report.version = outcome.installed.version
        report.result = .updated
        do {
            try Lifecycle(store: store).recordInstall(app, outcome.installed.version, maxTrialLaunches: configuration.maxTrialLaunches)
        } catch {
            // Installed all the same: the trial then runs with the default launch limit.
            logger.warning("\(app): cannot record the trial's launch limit: \(error)")
        }
        try saveETag(newETag, current: outcome.installed.version, check: &check, app: app)
    }

    private func saveETag(_ etag: String?, current: Version, check: inout CheckState, app: String) throws {
        check.etag = etag
        check.etagCurrent = current.description
        try store.saveCheckState(check, for: app)
    }

    // MARK: - Use

    /// Resolves `url` to a file of an active version, honouring whitelist, miniVersion and rollout.
    ///
    /// - Parameter deviceID: the id for the rollout bucket; the root's stable id when nil.
    public func resolve(_ url: URL, deviceID: String? = nil) throws -> Resolution {
        try Resolver(store: store, deviceID: deviceID ?? DeviceID.load(root: store.root)).resolve(url)
    }

    /// The state of one app, or of every app in the root when `app` is nil.
    public func status(app: String? = nil, deviceID: String? = nil) throws -> [AppStatus] {
        let apps = app.map { [$0] } ?? store.apps()
        let device = try deviceID ?? DeviceID.load(root: store.root)
        return apps.map { app in
            let installed = AppName.isValid(app) ? store.active(app) : nil
            let check = AppName.isValid(app) ? store.checkState(app) : CheckState()
            let miniVersion = [installed?.miniVersion, check.knownMiniVersion].compactMap { $0 }.max()
            var usable = false
            if let installed {
                usable = installed.version >= (miniVersion ?? installed.version)
                    && Resolver.rolloutBucket(deviceID: device, app: app) <= installed.rollout
                    && !Lifecycle(store: store).isBad(app, installed.version)
            }
            let backoff = AppName.isValid(app) ? BackoffState.load(store, app: app) : nil
            let next = configuration.throttle.nextCheck(
                after: check, backoff: backoff, policy: configuration.backoff, now: configuration.clock(), force: false)
            return AppStatus(
                app: app, installed: installed, miniVersion: miniVersion, usable: usable,
                path: installed.map { store.versionDirectory(app, $0.version) }, lastCheck: check.lastCheck,
                nextCheck: next, failures: backoff?.failures ?? 0,
                diskUsage: AppName.isValid(app) ? store.diskUsage(app) : DiskUsage())
        }
    }

    /// Makes the previously active version active again (an explicit local downgrade)
    /// and marks the version it leaves bad, so the next sync does not reinstall it.
    ///
    /// - Throws: `.busy` while a sync runs; `.stateInvalid` when no version, or no
    ///   previous version that is not bad, is kept.
    @discardableResult
    public func rollback(app: String) throws -> (from: Version, to: Version) {
        guard AppName.isValid(app) else { throw OfflineAgentError(.usage, "invalid app name '\(app)'") }
        let transition = try Lifecycle(store: store).rollBack(
            app, reason: "rolled back by command", event: .rollback, requireTarget: true, requireLock: true)
        guard let transition, let to = transition.to else {
            throw OfflineAgentError(.install, "no previous version of '\(app)' is kept", cause: .stateInvalid)
        }
        return (transition.from, to)
    }

    // MARK: - Cookies

    /// The saved (persistent, unexpired) cookies of a profile, oldest first.
    ///
    /// - Throws: `OfflineAgentError(.usage)` for an invalid profile name, `.install` for
    ///   a jar file that is not one (the next sync sets such a file aside).
    public nonisolated func cookies(profile: String = CookieProfile.defaultName) throws -> [Cookie] {
        try CookieProfile(root: store.root, name: profile).read()
    }

    /// Empties a profile's jar. Takes the root's lock, so a sync in progress cannot
    /// write the cookies back afterwards (`.busy` while one runs).
    public func clearCookies(profile: String = CookieProfile.defaultName) throws {
        let jar = try CookieProfile(root: store.root, name: profile)
        let lock = try RootLock(root: store.root)
        defer { withExtendedLifetime(lock) {} }
        try jar.clear()
    }

    // MARK: - Lifecycle

    /// Confirms the active (trial) version of `app`: it stays, and launches are no longer counted.
    ///
    /// - Returns: the confirmed version.
    /// - Throws: `.stateInvalid` when nothing is active or the active version is marked bad.
    @discardableResult
    public func markGood(app: String) throws -> Version {
        try Lifecycle(store: store).markGood(app)
    }

    /// Reports that the active version of `app` does not work: it is marked bad (never
    /// served offline nor installed again) and the previous good version becomes active
    /// at once; with none, nothing of the app is served offline.
    ///
    /// While a sync holds the root's lock the switch completes at the next launch or
    /// sync (`switched == false`); the bad version is not served in between.
    /// - Throws: `.stateInvalid` when no version, or only a bad one, is active.
    @discardableResult
    public func markBad(app: String, reason: String = "reported failing") throws -> LifecycleTransition {
        try Lifecycle(store: store).markBad(app, reason: reason)
    }

    /// Counts one launch of `app` for hosts that resolve in-process (`serve` counts
    /// `/open` and `/session/restore`). A trial version that already had its
    /// `maxTrialLaunches` launches without `markGood` is rolled back first, as `markBad` does.
    public func recordLaunch(app: String) throws -> LaunchOutcome {
        try Lifecycle(store: store).recordLaunch(app)
    }

    /// Keeps the active version of `app`: syncs report `held` and download nothing until `unhold`.
    public func hold(app: String) throws {
        try Lifecycle(store: store).setHeld(app, true)
    }

    /// Lets syncs update `app` again.
    public func unhold(app: String) throws {
        try Lifecycle(store: store).setHeld(app, false)
    }

    /// The state, launches, hold, bad versions and history of `app`.
    public func lifecycle(app: String) -> LifecycleStatus {
        Lifecycle(store: store).status(app)
    }
}
