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
///
/// Blocking work (patching, extraction, hashing, fsync, removing trees) runs on the
/// agent's own two threads, never on Swift's cooperative pool, so a host app's async
/// code keeps running while an update installs. Call `shutdown()` when done with the
/// agent (releasing it does the same, without waiting).
public actor Agent {
    /// The root's on-disk layout.
    public nonisolated let store: Store
    /// Settings shared by every sync of this agent.
    public nonisolated let configuration: AgentConfiguration
    nonisolated let logger: Logger
    nonisolated let broadcaster = ProgressBroadcaster()
    /// Threads for blocking work, started by the first sync that needs one.
    nonisolated let pool = BlockingPool()

    /// An agent over the root directory `root` (created by the first sync).
    ///
    /// - Parameters:
    ///   - root: The directory holding every app's versions, downloads and state.
    ///   - configuration: Timeouts, limits and the clock.
    ///   - logger: Receives the agent's messages.
    public init(root: URL, configuration: AgentConfiguration = AgentConfiguration(), logger: Logger = Logger(label: "offline-agent")) {
        self.store = Store(root: root.path)
        self.configuration = configuration
        self.logger = logger
    }

    deinit {
        broadcaster.finish()
        pool.shutdownInBackground()
    }

    // MARK: - Progress

    /// Progress of every sync this agent runs, from now on.
    ///
    /// Each access returns a new stream, and every stream gets every event: two tasks
    /// reading `agent.events` both see each sync whole. A stream whose reader stops (its
    /// task cancelled, the stream dropped) is unsubscribed; all streams finish at
    /// `shutdown()` or when the agent is released, and one obtained afterwards is
    /// already finished. A reader that falls far behind loses the oldest waiting events
    /// first (256 are kept), so it never costs unbounded memory.
    ///
    /// ```swift
    /// Task { for await event in agent.events { print(event.app, event.phase, event.completed, event.total) } }
    /// ```
    /// To follow one sync only, pass `progress:` to `sync` or use `startSync`.
    public nonisolated var events: AsyncStream<ProgressEvent> { broadcaster.subscribe() }

    /// Finishes every `events` stream and stops the agent's threads for blocking work.
    ///
    /// A sync still running fails with the `cancelled` cause before its next blocking
    /// step (one already running completes first; the installed version stays whole);
    /// syncs started afterwards fail the same way at once. Resolving, status and the
    /// lifecycle calls keep working.
    public func shutdown() async {
        broadcaster.finish()
        await pool.shutdown()
    }

    // MARK: - Sync

    /// Checks `manifest` for a newer version of `app` and installs it.
    ///
    /// Never throws: a failure is reported with `result == .failed` and its error, and
    /// leaves the active version as it was. A busy root reports `.busy` as the error code;
    /// a cancelled task, the `cancelled` cause.
    /// - Parameters:
    ///   - app: The app to sync (a valid `AppName`).
    ///   - manifestURL: Where its manifest is served.
    ///   - options: Keys, profile, device id and network policy for this sync.
    ///   - progress: called with this sync's events only, in order, on the
    ///     sync's task (keep it short); the last is `.done`, before `sync` returns. The
    ///     same events also go to every `events` stream.
    public nonisolated func sync(
        app: String, manifest manifestURL: URL, options: SyncOptions = SyncOptions(),
        progress: (@Sendable (ProgressEvent) -> Void)? = nil
    ) async -> SyncReport {
        let report = await sync(app: app, manifestURL: manifestURL, options: options, session: nil, progress: progress)
        await flushReports()
        return report
    }

    /// Syncs several apps of this root, at most `concurrency` at a time, so N dead servers
    /// cost about N / `concurrency` deadlines instead of N. The root's lock is taken once,
    /// by the first app that gets past its throttle, and held until the batch ends.
    ///
    /// - Parameters:
    ///   - requests: The apps to sync, each with its manifest and options.
    ///   - concurrency: How many apps sync at once (at least 1).
    ///   - progress: called with the batch's events (`ProgressEvent.app` tells
    ///     the apps apart; each app's last is `.done`), from the apps' tasks at once:
    ///     it must be safe to call concurrently.
    /// - Returns: one report per request, in the order of `requests`.
    public nonisolated func sync(
        _ requests: [SyncRequest], concurrency: Int = 4, progress: (@Sendable (ProgressEvent) -> Void)? = nil
    ) async -> [SyncReport] {
        let session = SyncSession(root: store.root)
        let reports = await withTaskGroup(of: (Int, SyncReport).self) { group in
            var reports = [SyncReport?](repeating: nil, count: requests.count)
            var next = 0
            func startNext() {
                guard next < requests.count else { return }
                let index = next, request = requests[index]
                next += 1
                group.addTask {
                    (index, await self.sync(
                        app: request.app, manifestURL: request.manifest, options: request.options, session: session,
                        progress: progress))
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
        await flushReports()
        return reports
    }

    /// Starts syncing `request` in a new task and returns at once: read the sync's own
    /// events from `events` (the stream finishes when the sync ends, also on failure and
    /// cancellation), its report from `value`; `cancel()` stops it.
    ///
    /// ```swift
    /// let sync = agent.startSync(SyncRequest(app: "mall", manifest: manifestURL))
    /// for await event in sync.events { print(event.phase, event.completed, event.total) }
    /// let report = await sync.value
    /// ```
    public nonisolated func startSync(_ request: SyncRequest) -> SyncTask<SyncReport> {
        let (events, continuation) = ProgressBroadcaster.makeStream()
        let task = Task {
            defer { continuation.finish() }
            return await self.sync(app: request.app, manifest: request.manifest, options: request.options) { continuation.yield($0) }
        }
        return SyncTask(events: events, task: task)
    }

    /// Starts a batch (`sync(_:concurrency:progress:)`) in a new task: `events` carries
    /// every app's events (told apart by `ProgressEvent.app`) and finishes when the last
    /// app's sync ends; `value` is one report per request, in order.
    public nonisolated func startSync(_ requests: [SyncRequest], concurrency: Int = 4) -> SyncTask<[SyncReport]> {
        let (events, continuation) = ProgressBroadcaster.makeStream()
        let task = Task {
            defer { continuation.finish() }
            return await self.sync(requests, concurrency: concurrency) { continuation.yield($0) }
        }
        return SyncTask(events: events, task: task)
    }

    private nonisolated func sync(
        app: String, manifestURL: URL, options: SyncOptions, session: SyncSession?,
        progress: (@Sendable (ProgressEvent) -> Void)?
    ) async -> SyncReport {
        let broadcaster = self.broadcaster
        let emit: @Sendable (ProgressEvent) -> Void = { event in
            broadcaster.yield(event)
            progress?(event)
        }
        let started = ContinuousClock.now
        // `run` fills in the versions before it can change anything: a throttled no-op
        // reads only the `current` link.
        var report = SyncReport(app: app, result: .failed, version: nil, previousVersion: nil)
        do {
            try await run(app: app, manifestURL: manifestURL, options: options, session: session, emit: emit, report: &report)
        } catch var error as OfflineAgentError {
            // Whatever a cancelled sync's last step failed with (a dropped connection,
            // a skipped step), the reason is the cancellation.
            if Task.isCancelled, error.cause != .cancelled {
                error = OfflineAgentError(error.code, "cancelled: \(error.reason)", cause: .cancelled, path: error.path, underlying: error.underlying)
            }
            report.result = .failed
            report.error = error
            report.version = AppName.isValid(app) ? store.active(app)?.version : nil
            // The caller reports the failure (the CLI prints one line); this is detail for --verbose.
            if error.code == .busy || error.cause == .cancelled {
                logger.info("\(app): \(error)")
            } else {
                logger.notice("\(app): \(error)")
            }
        } catch {
            report.result = .failed
            report.error = Task.isCancelled
                ? OfflineAgentError(.install, "cancelled: \(error)", cause: .cancelled)
                : OfflineAgentError(.install, "unexpected failure: \(error)", cause: .unexpected)
            report.version = AppName.isValid(app) ? store.active(app)?.version : nil
        }
        await queueReport(report, options: options, duration: ContinuousClock.now - started)
        emit(ProgressEvent(app: app, phase: .done))
        return report
    }

    private nonisolated func run(
        app: String, manifestURL: URL, options: SyncOptions, session: SyncSession?,
        emit: @escaping @Sendable (ProgressEvent) -> Void, report: inout SyncReport
    ) async throws {
        guard AppName.isValid(app) else { throw OfflineAgentError(.usage, "invalid app name '\(app)'") }
        let publicKeys: [Curve25519.Signing.PublicKey]
        let profile: CookieProfile
        do {
            publicKeys = try options.trustedKeys.map(ManifestSignature.publicKey(base64:))
            profile = try CookieProfile(root: store.root, name: options.profile)
            if pool.isShutDown { throw OfflineAgentError(.install, "the agent is shut down", cause: .cancelled) }
            if Task.isCancelled { throw OfflineAgentError(.install, "cancelled before it started", cause: .cancelled) }
        } catch {
            // Refused before anything was read: the installed version stands.
            report.previousVersion = store.active(app)?.version
            throw error
        }
        let now = configuration.clock()
        let throttle = configuration.throttle
        // Fast path without the lock: a throttled no-op is what cron runs most. State a
        // wrong clock left behind is repaired under the lock first, so a clamp cannot slide.
        let stored = store.checkState(app)
        let backoff = BackoffState.load(store, app: app)
        let policy = configuration.backoff
        let needsRepair = throttle.sanitized(stored, now: now) != stored
        if let next = throttle.nextCheck(after: stored, backoff: backoff, policy: policy, now: now, force: options.force), !needsRepair {
            report.throttled(
                until: next, version: store.linkedVersion(app), reason: throttle.reason(waitingUntil: next, state: stored, backoff: backoff))
            return
        }
        // The version before: what a failure reports beside the one it leaves (the same one,
        // unless a repair under the lock rolled back first).
        let before = store.active(app)?.version
        report.previousVersion = before
        report.version = before
        // Locking, repairs and housekeeping write, fsync and remove trees: off the cooperative pool.
        let start = try await pool.run(.install) {
            try self.start(app: app, now: now, stored: stored, backoff: backoff, needsRepair: needsRepair, force: options.force, session: session)
        }
        guard case .ready(let lock, let check, let failures, let installed, let lastChecked) = start else {
            if case .throttled(let next) = start {
                let reason = throttle.reason(waitingUntil: next, state: store.checkState(app), backoff: BackoffState.load(store, app: app))
                report.throttled(until: next, version: before, reason: reason)
            }
            return
        }
        defer { withExtendedLifetime(lock) {} }
        report.previousVersion = installed?.version
        report.version = installed?.version

        emit(ProgressEvent(app: app, phase: .checking))
        let (cookies, warning) = session?.jar(profile, now: now) ?? profile.open(now: now)
        if let warning { logger.warning("\(app): \(warning)") }
        let fetcher = HTTPFetcher(settings: configuration.network, cookies: cookies, logger: logger)
        do {
            try await update(app: app, manifestURL: manifestURL, installed: installed, check: check,
                             publicKeys: publicKeys, options: options, now: now, fetcher: fetcher, emit: emit, report: &report)
        } catch {
            await fetcher.shutdown()
            // A cancelled sync is the host's doing, not the server's: no failed check is
            // counted, and it is no check at all: the next run goes on at once (resuming
            // what was downloaded) instead of waiting out the throttle.
            if Task.isCancelled {
                let store = self.store
                _ = try? await pool.run(.install, cancellable: false) {
                    // Under the root's lock still: no other run checked in between.
                    var state = store.checkState(app)
                    state.lastCheck = lastChecked
                    try store.saveCheckState(state, for: app)
                }
                throw error
            }
            // Consecutive failed checks wait longer and longer (a forced sync too: it failed).
            // With nothing installed there is nothing to serve meanwhile (a kiosk that booted
            // before its network): the wait stays at the first step, 5 minutes ±10 %.
            let count = (failures?.failures ?? 0) + 1
            let steps = installed == nil ? 1 : count
            let next = now.addingTimeInterval(policy.delay(failures: steps, spread: Double.random(in: -1...1)))
            let store = self.store
            _ = try? await pool.run(.install, cancellable: false) { try BackoffState(failures: count, nextCheck: next).save(store, app: app) }
            // The 5-minute throttle holds as well, whichever ends later.
            report.nextCheck = max(next, now.addingTimeInterval(throttle.interval))
            throw error
        }
        await fetcher.shutdown()
        if failures != nil {
            let store = self.store
            _ = try? await pool.run(.install, cancellable: false) { BackoffState.clear(store, app: app) }
        }
    }

    /// The local start of a sync, under the root's lock: state a wrong clock or a crash
    /// left behind is repaired, leftovers go, and the check is recorded.
    private nonisolated func start(
        app: String, now: Date, stored: CheckState, backoff: BackoffState?, needsRepair: Bool, force: Bool,
        session: SyncSession?
    ) throws -> SyncStart {
        let throttle = configuration.throttle
        let policy = configuration.backoff
        try store.prepare(app)
        let lock: RootLock
        do {
            lock = try session?.lock() ?? RootLock(root: store.root)
        } catch let error as OfflineAgentError where error.code == .busy && needsRepair {
            // Only the repair needed the lock; the other run will see the same state.
            if let next = throttle.nextCheck(after: stored, backoff: backoff, policy: policy, now: now, force: force) {
                return .throttled(until: next)
            }
            throw error
        }
        let recorded = store.checkState(app)
        var check = throttle.sanitized(recorded, now: now)
        if check != recorded { try store.saveCheckState(check, for: app) }
        // Another process may have checked while we waited for nothing: look again under the lock.
        let failures = BackoffState.load(store, app: app)
        if let next = throttle.nextCheck(after: check, backoff: failures, policy: policy, now: now, force: force) {
            return .throttled(until: next)
        }
        store.cleanLeftovers(app)
        // Finish a rollback a crash or a busy root left half done, before deciding anything.
        try Lifecycle(store: store).repair(app)
        store.collectDownloads(app, plan: nil)
        let installed = store.active(app)
        if installed == nil, store.isInconsistent(app) {
            logger.warning("\(app): recorded version disagrees with the disk; repairing with a full install")
        }
        let lastChecked = check.lastCheck
        check.lastCheck = now
        try store.saveCheckState(check, for: app)
        return .ready(lock: lock, check: check, failures: failures, installed: installed, lastChecked: lastChecked)
    }

    /// The network part of a sync: manifest, rules, and the update itself. Every local
    /// write between the network steps goes through the pool (they fsync).
    private nonisolated func update(
        app: String, manifestURL: URL, installed: InstalledVersion?, check: CheckState,
        publicKeys: [Curve25519.Signing.PublicKey], options: SyncOptions, now: Date, fetcher: HTTPFetcher,
        emit: @escaping @Sendable (ProgressEvent) -> Void, report: inout SyncReport
    ) async throws {
        var check = check
        let store = self.store
        let client = ManifestClient(fetcher: fetcher, publicKeys: publicKeys)
        let etag = ManifestDecision.requestETag(check, installed: installed?.version)
        let response: ManifestResponse
        do {
            if let trustedRoot = options.trustedRoot {
                // A TUF repository: metadata refreshed, the manifest a verified target (no ETag: it is cached by hash).
                response = try await TUFManifestSource(fetcher: fetcher, agentRoot: store.root, trustedRoot: Array(trustedRoot))
                    .fetch(manifestURL: manifestURL, app: app, now: now)
            } else {
                response = try await client.fetch(
                    base: manifestURL, app: app, current: installed?.version, etag: etag, now: now, appendQuery: options.manifestQuery)
            }
        } catch {
            // The answer we cached an ETag for may be gone: ask afresh next time.
            check.etag = nil
            let forgotten = check
            _ = try? await pool.run(.manifest) { try store.saveCheckState(forgotten, for: app) }
            throw error
        }
        if case .retryAfter = response {} else if check.notBefore != nil {
            // The server answered (a forced check past its Retry-After): its wish is spent.
            check.notBefore = nil
            let spent = check
            try await pool.run(.install) { try store.saveCheckState(spent, for: app) }
        }
        let manifest: Manifest
        let newETag: String?
        switch response {
        case .notModified:
            report.result = .upToDate
            return
        case .retryAfter(let until):
            check.notBefore = min(until, now.addingTimeInterval(Throttle.maxAhead))
            let waiting = check
            try await pool.run(.install) { try store.saveCheckState(waiting, for: app) }
            report.result = .throttled
            report.throttleReason = "the server asked to wait (Retry-After)"
            report.nextCheck = until
            return
        case .manifest(let value, let etag):
            manifest = value
            newETag = etag
        }
        report.offeredVersion = manifest.version
        report.fullSize = manifest.isPatch ? manifest.fullSize : manifest.size
        // What to do with the manifest is `ManifestDecision`'s; this runs it, learning
        // each fact it asks for (a few steps: every fact is asked at most once).
        let planned = ManifestDecision.planned(check, manifest: manifest, installed: installed?.version)
        var facts = ManifestFacts(
            manifest: manifest, installed: installed, now: now, knownEpoch: check.knownEpoch ?? 0,
            installedEpoch: ManifestDecision.installedEpoch(check, installed: installed?.version))
        decide: while true {
            switch ManifestDecision.decide(facts) {
            case .needs(.lifecycleRefusal):
                CrashPoint.afterManifest.hit()
                // A version marked bad here is never installed again; a held app keeps its version.
                facts.lifecycleRefusal = .some(try await pool.run(.install) {
                    store.collectDownloads(app, plan: manifest, manifestURL: manifestURL, installed: installed?.version)
                    try store.saveCheckState(planned, for: app)
                    return Lifecycle(store: store).refusal(app, offered: manifest.version, installed: installed?.version)
                })
            case .needs(.originClaim):
                // An origin the device does not allow this app, or that another app holds:
                // refused before any byte is downloaded; the installed versions keep serving.
                let allowed = options.allowedOrigins
                facts.originRefusal = .some(try await pool.run(.install) {
                    OriginClaims.refusal(app: app, whitelist: manifest.whitelist, allowed: allowed, store: store)
                })
            case .needs(.bucket):
                let root = store.root
                let deviceID: String
                if let chosen = options.deviceID {
                    deviceID = chosen
                } else {
                    deviceID = try await pool.run(.manifest) { try DeviceID.load(root: root) }
                }
                facts.bucket = Resolver.rolloutBucket(deviceID: deviceID, app: app)
            case .needs(.network):
                facts.network = try await pool.run(.manifest, { [logger] in options.networkKind(logger: logger) })
            case .refuseEpoch(let offered, let known):
                throw OfflineAgentError(
                    .manifest, "manifest is of epoch \(offered), below epoch \(known) this device accepted (a replay from before a recovery)",
                    cause: .epochRollback)
            case .refuseDowngrade(let offered, let installed):
                throw OfflineAgentError(.manifest, "manifest offers \(offered), below installed \(installed) (downgrade refused)", cause: .downgrade)
            case .refused(let refusal):
                report.result = refusal
                return
            case .originRefused(let refusal):
                throw refusal
            case .differentPackage(let version):
                throw OfflineAgentError(.manifest, "manifest describes a different package for installed version \(version)")
            case .recordSameVersion(let updated):
                try await pool.run(.install) {
                    try store.updateRecord(updated, app: app)
                    try store.saveCheckState(ManifestDecision.settled(planned, etag: newETag, current: updated.version, epoch: manifest.epoch), for: app)
                }
                report.result = .upToDate
                return
            case .notInStage(let stage, let bucket):
                report.result = .notInStage
                report.stage = (stage, bucket)
                return
            case .deferred:
                report.result = .deferred
                return
            case .install:
                break decide
            }
        }
        let counter = ByteCounter()
        var configuration = self.configuration
        if let trial = options.maxTrialLaunches { configuration.maxTrialLaunches = trial }
        let updater = Updater(
            store: store, app: app, manifest: manifest, manifestURL: manifestURL, installed: installed,
            fetcher: fetcher, configuration: configuration, logger: logger, progress: emit, pool: pool, counter: counter,
            allowedOrigins: options.allowedOrigins)
        // A failed sync reports what it downloaded too (a partial file, a patch and a full).
        defer { report.bytesDownloaded = counter.value }
        let outcome = try await updater.run()
        report.patchFallbackReason = outcome.patchFallbackReason
        report.via = outcome.installed.via
        report.version = outcome.installed.version
        report.result = .updated
        let version = outcome.installed.version
        let logger = self.logger
        // Installed: the bookkeeping runs even if the sync is cancelled now.
        try await pool.run(.install, cancellable: false) {
            do {
                try Lifecycle(store: store).recordInstall(app)
            } catch {
                // Installed all the same: the next lifecycle step records it (its trial is in its record).
                logger.warning("\(app): cannot record the install in the lifecycle: \(error)")
            }
            try store.saveCheckState(ManifestDecision.settled(planned, etag: newETag, current: version, epoch: manifest.epoch), for: app)
        }
    }

    // MARK: - Use

    /// Resolves `url` to a file of an active version, honouring whitelist, miniVersion and rollout.
    ///
    /// - Parameters:
    ///   - url: the URL a web view is about to load.
    ///   - deviceID: the id for the rollout bucket; the root's stable id when nil.
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
    public func rollback(app: String) async throws -> (from: Version, to: Version) {
        guard AppName.isValid(app) else { throw OfflineAgentError(.usage, "invalid app name '\(app)'") }
        let lifecycle = Lifecycle(store: store)
        let transition = try await offPool {
            try lifecycle.rollBack(app, reason: "rolled back by command", event: .rollback, requireTarget: true, requireLock: true)
        }
        guard let transition, let to = transition.to else {
            throw OfflineAgentError(.lifecycle, "nothing to roll back to: no previous version of '\(app)' is kept", cause: .stateInvalid)
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
    public func clearCookies(profile: String = CookieProfile.defaultName) async throws {
        let jar = try CookieProfile(root: store.root, name: profile)
        let root = store.root
        try await offPool {
            let lock = try RootLock(root: root)
            defer { withExtendedLifetime(lock) {} }
            try jar.clear()
        }
    }

    // MARK: - Lifecycle

    /// Confirms the active (trial) version of `app`: it stays, and launches are no longer counted.
    ///
    /// - Returns: the confirmed version.
    /// - Throws: `.stateInvalid` when nothing is active or the active version is marked bad.
    @discardableResult
    public func markGood(app: String) async throws -> Version {
        let lifecycle = Lifecycle(store: store)
        return try await offPool { try lifecycle.markGood(app) }
    }

    /// Reports that the active version of `app` does not work: it is marked bad (never
    /// served offline nor installed again) and the previous good version becomes active
    /// at once; with none, nothing of the app is served offline.
    ///
    /// While a sync holds the root's lock the switch completes at the next launch or
    /// sync (`switched == false`); the bad version is not served in between.
    /// - Throws: `.stateInvalid` when no version, or only a bad one, is active.
    @discardableResult
    public func markBad(app: String, reason: String = "reported failing") async throws -> LifecycleTransition {
        let lifecycle = Lifecycle(store: store)
        return try await offPool { try lifecycle.markBad(app, reason: reason) }
    }

    /// Confirms `version` of `app`, only while it is the active version: the version-bound
    /// confirmation a page, host or D-Bus client uses for the version it ran, so a version
    /// a sync swapped in meanwhile is never confirmed by a page that never rendered it.
    ///
    /// - Returns: the confirmed version.
    /// - Throws: `.versionMismatch` (nothing changed) when `version` is not the active
    ///   version; `.stateInvalid` when nothing is active or it is marked bad.
    @discardableResult
    public func markGood(app: String, version: Version) async throws -> Version {
        let lifecycle = Lifecycle(store: store)
        return try await offPool { try lifecycle.markGood(app, version: version) }
    }

    /// Reports that `version` of `app` does not work, only while it is the active version
    /// (as `markBad(app:reason:)` otherwise): an old page never marks a newer version bad.
    ///
    /// - Throws: `.versionMismatch` (nothing changed) when `version` is not the active
    ///   version, or is marked bad already.
    @discardableResult
    public func markBad(app: String, version: Version, reason: String = "reported failing") async throws -> LifecycleTransition {
        let lifecycle = Lifecycle(store: store)
        return try await offPool { try lifecycle.markBad(app, version: version, reason: reason) }
    }

    /// Counts one launch of `version` of `app`, only while it is the active version
    /// (`.versionChanged` otherwise, nothing counted); see `recordLaunch(app:)`.
    public func recordLaunch(app: String, version: Version) async throws -> LaunchOutcome {
        let lifecycle = Lifecycle(store: store)
        return try await offPool { try lifecycle.recordLaunch(app, version: version) }
    }

    /// Counts one launch of `app` for hosts that resolve in-process (`serve` counts
    /// `/open` and `/session/restore`). A trial version that already had its
    /// `maxTrialLaunches` launches without `markGood` is rolled back first, as `markBad` does.
    public func recordLaunch(app: String) async throws -> LaunchOutcome {
        let lifecycle = Lifecycle(store: store)
        return try await offPool { try lifecycle.recordLaunch(app) }
    }

    /// Clears the bad mark of `version` of `app`, or of all its bad versions when nil:
    /// the operator's way out after a rollback (recorded in the history).
    ///
    /// - Returns: the versions cleared.
    /// - Throws: `.stateInvalid` when nothing (or not `version`) is marked bad.
    @discardableResult
    public func forgetBad(app: String, version: Version? = nil) async throws -> [Version] {
        let lifecycle = Lifecycle(store: store)
        return try await offPool { try lifecycle.forgetBad(app, version: version) }
    }

    /// Keeps the active version of `app`: syncs report `held` and download nothing until `unhold`.
    public func hold(app: String) async throws {
        let lifecycle = Lifecycle(store: store)
        try await offPool { try lifecycle.setHeld(app, true) }
    }

    /// Lets syncs update `app` again.
    public func unhold(app: String) async throws {
        let lifecycle = Lifecycle(store: store)
        try await offPool { try lifecycle.setHeld(app, false) }
    }

    /// Runs a lifecycle step (locks, fsync, tree removal) on the blocking pool. It runs
    /// even when the caller is cancelled: a transition is never left half done.
    @discardableResult
    private func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await pool.run(.install, cancellable: false, body)
    }

    /// The state, launches, hold, bad versions and history of `app`.
    public func lifecycle(app: String) -> LifecycleStatus {
        Lifecycle(store: store).status(app)
    }
}
