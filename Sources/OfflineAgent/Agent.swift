import Crypto
import Foundation
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
        let before = AppName.isValid(app) ? store.active(app) : nil
        var report = SyncReport(app: app, result: .failed, version: before?.version, previousVersion: before?.version)
        do {
            try await run(app: app, manifestURL: manifestURL, options: options, report: &report)
        } catch let error as OfflineAgentError {
            report.result = .failed
            report.error = error
            report.version = AppName.isValid(app) ? store.active(app)?.version : nil
            logger.error("\(app): \(error)")
        } catch {
            report.result = .failed
            report.error = OfflineAgentError(.install, "unexpected failure: \(error)")
        }
        continuation.yield(ProgressEvent(app: app, phase: .done, completed: 0, total: 0))
        return report
    }

    private func run(app: String, manifestURL: URL, options: SyncOptions, report: inout SyncReport) async throws {
        guard AppName.isValid(app) else { throw OfflineAgentError(.usage, "invalid app name '\(app)'") }
        let publicKey = try options.publicKey.map(ManifestSignature.publicKey(base64:))
        let profile = try CookieProfile(root: store.root, name: options.profile)
        let now = Date()
        // Fast path without the lock: a throttled no-op is what cron runs most.
        if let next = configuration.throttle.nextCheck(after: store.checkState(app), now: now, force: options.force) {
            report.result = .throttled
            report.nextCheck = next
            return
        }
        try store.prepare(app)
        let lock = try RootLock(root: store.root)
        defer { withExtendedLifetime(lock) {} }
        var check = store.checkState(app)
        // Another process may have checked while we waited for nothing: look again under the lock.
        if let next = configuration.throttle.nextCheck(after: check, now: now, force: options.force) {
            report.result = .throttled
            report.nextCheck = next
            return
        }
        store.cleanLeftovers(app)
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
        let (cookies, warning) = profile.open(now: now)
        if let warning { logger.warning("\(app): \(warning)") }
        let fetcher = HTTPFetcher(settings: configuration.network, cookies: cookies, logger: logger)
        do {
            try await update(app: app, manifestURL: manifestURL, installed: installed, check: check,
                             publicKey: publicKey, options: options, now: now, fetcher: fetcher, report: &report)
        } catch {
            await fetcher.shutdown()
            throw error
        }
        await fetcher.shutdown()
    }

    /// The network part of a sync: manifest, rules, and the update itself.
    private func update(
        app: String, manifestURL: URL, installed: InstalledVersion?, check: CheckState,
        publicKey: Curve25519.Signing.PublicKey?, options: SyncOptions, now: Date, fetcher: HTTPFetcher,
        report: inout SyncReport
    ) async throws {
        var check = check
        let client = ManifestClient(fetcher: fetcher, publicKey: publicKey)
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
        let manifest: Manifest
        let newETag: String?
        switch response {
        case .notModified:
            report.result = .upToDate
            return
        case .retryAfter(let until):
            check.notBefore = until
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
                throw OfflineAgentError(.manifest, "manifest offers \(manifest.version), below installed \(installed.version) (downgrade refused)")
            }
        }
        CrashPoint.afterManifest.hit()
        store.collectDownloads(app, plan: manifest, manifestURL: manifestURL, installed: installed?.version)
        // A trusted manifest's miniVersion holds from now on, whatever happens to the download.
        check.knownMiniVersion = max(check.knownMiniVersion ?? manifest.miniVersion, manifest.miniVersion)
        check.etag = nil
        try store.saveCheckState(check, for: app)

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
        let updater = Updater(
            store: store, app: app, manifest: manifest, manifestURL: manifestURL, installed: installed,
            fetcher: fetcher, configuration: configuration, logger: logger, continuation: continuation)
        let outcome = try await updater.run()
        report.bytesDownloaded = outcome.bytesDownloaded
        report.patchFallbackReason = outcome.patchFallbackReason
        report.via = outcome.installed.via
        report.version = outcome.installed.version
        report.result = .updated
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
            }
            return AppStatus(
                app: app, installed: installed, miniVersion: miniVersion, usable: usable,
                path: installed.map { store.versionDirectory(app, $0.version) }, lastCheck: check.lastCheck,
                diskUsage: AppName.isValid(app) ? store.diskUsage(app) : DiskUsage())
        }
    }

    /// Makes the previously active version active again (an explicit local downgrade).
    @discardableResult
    public func rollback(app: String) throws -> (from: Version, to: Version) {
        guard AppName.isValid(app) else { throw OfflineAgentError(.usage, "invalid app name '\(app)'") }
        let lock = try RootLock(root: store.root)
        defer { withExtendedLifetime(lock) {} }
        let result = try store.rollback(app)
        // The cached ETag belongs to the version we left.
        var check = store.checkState(app)
        check.etag = nil
        try store.saveCheckState(check, for: app)
        return result
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
}
