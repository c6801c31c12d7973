import COfflineSDBus
import FoundationEssentials
import Logging
import NIOPosix
import OfflineAgent
import Synchronization
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

/// The agent's D-Bus service (docs/DBUS.md): one object per app under
/// `org.offlineagent.Agent1`, a manager object, and the signals of every install,
/// rollback and sync, whoever made it.
///
/// The connection lives on one thread of its own (`BusDispatcher`); the root is read on
/// the cooperative pool and the lifecycle marks run on NIO's blocking pool, so a slow
/// disk or a lifecycle lock held by another process never stalls the bus.
///
/// ```swift
/// let service = try await AgentBusService.start(AgentBusConfiguration(bus: .session, root: root, servePort: port, status: json))
/// // … serve …
/// await service.stop()
/// ```
public final class AgentBusService: Sendable {
    /// What the service exports.
    public let configuration: AgentBusConfiguration
    private let logger: Logger
    private let store: Store
    private let agent: Agent
    private let loop: BusLoop
    private let state = Mutex(State())
    private let changes: AsyncStream<Void>
    private let changed: AsyncStream<Void>.Continuation
    private let tasks = Mutex<[Task<Void, Never>]>([])
    /// `Resolve`'s reading of the root, made by the first call (it needs the device id).
    private let resolveCache = Mutex<ResolveCache?>(nil)

    private struct State {
        var snapshots: [String: AppSnapshot] = [:]
        var jobs: [UInt64: SyncJob] = [:]
        var nextJob: UInt64 = 0
        /// Apps with a sync this service runs: their check is not reported as another's sync.
        var syncing: [String: UInt64] = [:]
        /// Syncs of this service that ended: the next reading of the root (which sees what
        /// they did) announces them after the changes they made.
        var finishing: [String: UInt64] = [:]
        /// Apps another process's sync installed a version of, in a reading before the one
        /// that sees that sync end: its `SyncFinished` then says `updated`.
        var installedBySync: Set<String> = []
        /// What the next reading reads: every app (`full`), or only the apps whose
        /// directories inotify named since the last one.
        var full = false
        var partial: Set<String> = []
        /// The progress record of another process's sync last sent on, by app.
        var lastProgress: [String: ProgressRecord] = [:]
        /// Readings asked for and done: a caller waiting for a reading that started after
        /// it asked (`refreshed()`) waits until `done` reaches its ticket.
        var asked: UInt64 = 0
        var done: UInt64 = 0
        var waiting: [(ticket: UInt64, continuation: CheckedContinuation<Void, Never>)] = []
        var stopped = false
    }

    /// Finished jobs kept for their properties.
    static let keptJobs = 64

    private init(_ configuration: AgentBusConfiguration, logger: Logger) throws(BusError) {
        self.configuration = configuration
        self.logger = logger
        store = Store(root: configuration.root)
        agent = Agent(root: URL(fileURLWithPath: configuration.root), logger: logger)
        loop = try BusLoop()
        (changes, changed) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    /// Reads the root, connects to the bus, exports the objects and owns the bus name.
    ///
    /// - Throws: an error naming why (libsystemd missing, no bus, the name owned by another
    ///   process or refused by the bus policy).
    public static func start(_ configuration: AgentBusConfiguration, logger: Logger = Logger(label: "offline-agent.dbus")) async throws -> AgentBusService {
        let service = try AgentBusService(configuration, logger: logger)
        service.loop.watch(configuration.root)
        service.loop.watch(configuration.root + "/apps", apps: true)
        _ = await service.refresh()
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let loop = service.loop
            let spawned = BusLoop.spawn {
                let dispatcher: BusDispatcher
                do {
                    dispatcher = try BusDispatcher(service: service, loop: loop, system: configuration.bus == .system)
                } catch {
                    continuation.resume(throwing: error)
                    loop.markExited()
                    return
                }
                continuation.resume()
                dispatcher.run(logger: logger)
                loop.markExited()
            }
            if !spawned { continuation.resume(throwing: BusError(name: DBusNames.errorName(.unexpected), message: "cannot start the bus thread")) }
        }
        service.startWatching()
        return service
    }

    /// Releases the bus name, answers calls still waiting with `cancelled`, and stops.
    public func stop() async {
        state.withLock { $0.stopped = true }
        for task in tasks.withLock({ $0 }) { task.cancel() }
        changed.finish()
        loop.enqueue { $0.stopped = true }
        await loop.exited()
        await agent.shutdown()
    }

    // MARK: - Watching the root

    private func startWatching() {
        let interval = configuration.pollInterval
        let watcher = Task { [self] in
            for await _ in changes {
                let (ticket, only) = state.withLock { state in
                    defer { (state.full, state.partial) = (false, []) }
                    return (state.asked, state.full || state.partial.isEmpty ? nil : state.partial)
                }
                publish(await refresh(only: only))
                let ready = state.withLock { state in
                    state.done = max(state.done, ticket)
                    let ready = state.waiting.filter { $0.ticket <= state.done }
                    state.waiting.removeAll { $0.ticket <= state.done }
                    return ready
                }
                for waiter in ready { waiter.continuation.resume() }
            }
            // Stopped: nobody reads the root any more.
            for waiter in state.withLock({ state in defer { state.waiting = [] }; return state.waiting }) { waiter.continuation.resume() }
        }
        let ticker = Task { [self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: interval)
                state.withLock { $0.full = true }
                changed.yield()
            }
        }
        let progress = Task { [self] in
            var last: [String: (phase: ProgressEvent.Phase, at: ContinuousClock.Instant)] = [:]
            for await event in agent.events {
                // At most one downloading signal per app every 50 ms: a fast download
                // reports every chunk, and each signal wakes every subscriber.
                let now = ContinuousClock.now
                if let previous = last[event.app], previous.phase == event.phase, event.phase == .downloading,
                   now - previous.at < .milliseconds(50), event.completed < event.total { continue }
                last[event.app] = (event.phase, now)
                let signal = BusSignal.progress(app: event.app, phase: event.phase.rawValue, bytes: event.completed, total: event.total)
                loop.enqueue { $0.emit(signal) }
            }
        }
        tasks.withLock { $0 = [watcher, ticker, progress] }
    }

    /// Something under the root changed (inotify, bus thread): read it again soon, only
    /// the apps whose directories changed unless `full`.
    func rootChanged(full: Bool, apps: [String] = []) {
        resolveCache.withLock { $0 }?.invalidate()
        state.withLock { state in
            state.asked &+= 1
            if full { state.full = true } else { state.partial.formUnion(apps) }
        }
        changed.yield()
    }

    /// App directories that appeared in `apps/` (bus thread): each is watched at once and
    /// its progress record read, since a first sync writes it as soon as it made the
    /// directory, maybe before the watch took. When `apps/` itself is not watched yet (the
    /// root was empty at start) and the root changed, it is watched now, with what it holds.
    func appsAppeared(_ created: [String], rootChanged full: Bool) {
        var created = created
        let apps = "\(store.root)/apps"
        if full, !loop.watchesAppsDirectory {
            loop.watch(apps, apps: true)
            if loop.watchesAppsDirectory { created += store.apps() }
        }
        for app in created where !loop.isWatched(app) {
            loop.watch("\(apps)/\(app)", app: app)
            if loop.isWatched(app) { progressRecorded(app) }
        }
    }

    /// Another process's sync replaced `app`'s progress record (bus thread): its step goes
    /// out as `Progress`. A sync of this service reports through its own events instead.
    func progressRecorded(_ app: String) {
        guard state.withLock({ $0.syncing[app] == nil }),
              let record = ProgressRecord.read(ProgressRecord.path(root: store.root, app: app)) else { return }
        // Two events read after the second write see the same record: it is sent once.
        let fresh = state.withLock { state in
            defer { state.lastProgress[app] = record }
            return state.lastProgress[app] != record
        }
        guard fresh else { return }
        loop.enqueue { $0.emit(.progress(app: app, phase: record.phase, bytes: record.bytes, total: record.total)) }
    }

    /// Returns once a reading of the root that started after this call has been
    /// published: a method that changed the root answers after its properties and
    /// signals went out, so a caller reading a property next sees the change.
    func refreshed() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let stopped = state.withLock { state in
                state.asked &+= 1
                state.full = true
                if !state.stopped { state.waiting.append((state.asked, continuation)) }
                return state.stopped
            }
            if stopped { continuation.resume() } else { changed.yield() }
        }
    }

    /// What changed since the last reading, as signals and changed properties.
    private struct Changes: Sendable {
        var signals: [BusSignal] = []
        var properties: [(path: String, names: [String])] = []
        var finishedJobs: [SyncJob] = []
    }

    /// Reads every app of the root again, or only the apps `only` names (whose directories
    /// inotify named: a swap is told without reading the others), and returns what changed.
    /// Only the watcher task calls it once the service runs, so readings never overtake
    /// one another.
    private func refresh(only named: Set<String>? = nil) async -> Changes {
        // An app whose directory went is gone from the root's listing: a full reading says so.
        let only = named.flatMap { $0.allSatisfy { FileSystem.isDirectory("\(store.root)/apps/\($0)") } ? $0 : nil }
        // Read before the root: a sync of this service that ended before this reading is
        // announced by it; one ending during it, by the next (its last writes may come
        // after what this reads). The root's lock likewise, before and after: a sync of
        // another process that was running at either point is not over in this reading.
        let busyBefore = Self.rootLocked(store.root)
        let endedBefore = state.withLock { Set($0.finishing.keys) }.filter { only?.contains($0) ?? true }
        var statuses: [AppStatus] = []
        if let only {
            for app in only.sorted() { statuses += (try? await agent.status(app: app, deviceID: configuration.deviceID)) ?? [] }
        } else {
            statuses = (try? await agent.status(deviceID: configuration.deviceID)) ?? []
        }
        let lifecycle = Lifecycle(store: store)
        var fresh: [String: AppSnapshot] = [:]
        for status in statuses where AppName.isValid(status.app) {
            var snapshot = AppSnapshot(status, lifecycle.status(status.app))
            var info = stat()
            if stat("\(store.root)/apps/\(status.app)/check.json", &info) == 0 {
                snapshot.checkStamp = "\(info.st_ino):\(info.st_mtim.tv_sec).\(info.st_mtim.tv_nsec)"
            }
            fresh[status.app] = snapshot
        }
        // A sync of another process holds the root's lock from its check to its install:
        // its end is announced once the lock is free (the check record is replaced at its start).
        let busy = busyBefore || Self.rootLocked(store.root)
        let (old, syncing, finished, known) = state.withLock { state in
            let ended = state.finishing.filter { endedBefore.contains($0.key) }
            // A partial reading: the apps it did not read stay as they were.
            if only != nil {
                for (app, snapshot) in state.snapshots where fresh[app] == nil { fresh[app] = snapshot }
            }
            if busy {
                for app in fresh.keys where state.syncing[app] == nil {
                    fresh[app]?.checkStamp = state.snapshots[app]?.checkStamp ?? ""
                }
            }
            defer {
                state.snapshots = fresh
                for app in ended.keys {
                    state.syncing[app] = nil
                    state.finishing[app] = nil
                }
            }
            return (state.snapshots, state.syncing, ended.values.sorted().compactMap { state.jobs[$0] }, fresh.keys.sorted())
        }
        for app in known where !loop.isWatched(app) { loop.watch("\(store.root)/apps/\(app)", app: app) }
        var changes = Changes()
        if Set(old.keys) != Set(fresh.keys) { changes.properties.append((DBusNames.managerPath, ["Apps"])) }
        for (app, now) in fresh.sorted(by: { $0.key < $1.key }) {
            guard let before = old[app] else { continue }
            let syncedHere = syncing[app] != nil
            let installedEarlier = state.withLock { $0.installedBySync.contains(app) }
            let signals = Self.signals(app: app, before: before, now: now, syncedHere: syncedHere, installedEarlier: installedEarlier)
            changes.signals += signals
            let installed = signals.contains { $0.member == "VersionInstalled" }
            let ended = signals.contains { $0.member == "SyncFinished" }
            if !syncedHere, ended || installed {
                state.withLock { state in
                    if ended { state.installedBySync.remove(app) } else { state.installedBySync.insert(app) }
                }
            }
            let names = now.changedProperties(from: before)
            if !names.isEmpty { changes.properties.append((DBusNames.appPath(app), names)) }
        }
        changes.finishedJobs = finished
        return changes
    }

    /// Whether a process holds the root's lock (`<root>/.lock`, a sync or a rollback), read
    /// from /proc/locks: taking the lock to find out would make that sync fail as busy.
    static func rootLocked(_ root: String) -> Bool {
        var info = stat()
        guard stat("\(root)/.lock", &info) == 0,
              let locks = FileSystem.readKernelFile("/proc/locks") else { return false }
        let inode = ":\(info.st_ino) "
        return locks.split(separator: "\n").contains { line in
            line.contains("FLOCK") && line.contains(inode)
        }
    }

    /// The signals that tell the change from `before` to `now`: an install (the active
    /// version went up), a rollback (the active version was marked bad), another
    /// process's sync (the check record was replaced while no sync of this service ran).
    static func signals(app: String, before: AppSnapshot, now: AppSnapshot, syncedHere: Bool, installedEarlier: Bool = false) -> [BusSignal] {
        var signals: [BusSignal] = []
        if let from = before.activeVersion,
           let bad = now.badVersions.first(where: { $0.version == from }),
           !before.badVersions.contains(where: { $0.version == from }) {
            let to = now.rolledBackTo[from.description] ?? now.activeVersion.flatMap { $0 == from ? nil : $0.description } ?? ""
            signals.append(.rolledBack(app: app, from: from.description, to: to, reason: bad.reason))
        } else if let version = now.activeVersion, version != before.activeVersion,
                  before.activeVersion.map({ version > $0 }) ?? true {
            signals.append(.versionInstalled(app: app, version: version.description, previous: before.activeVersion?.description ?? ""))
        }
        if !syncedHere, now.checkStamp != before.checkStamp, now.lastCheck != 0 {
            let installed = installedEarlier || signals.contains { $0.member == "VersionInstalled" }
            let outcome = installed ? "updated" : now.lastCheckOutcome == "failed" ? "failed" : "checked"
            signals.append(.syncFinished(app: app, outcome: outcome, errorCode: "", job: "/"))
        }
        return signals
    }

    private func publish(_ changes: Changes) {
        guard !changes.signals.isEmpty || !changes.properties.isEmpty || !changes.finishedJobs.isEmpty else { return }
        loop.enqueue { dispatcher in
            for signal in changes.signals { dispatcher.emit(signal) }
            for (path, names) in changes.properties {
                dispatcher.propertiesChanged(
                    path: path, interface: path == DBusNames.managerPath ? DBusNames.managerInterface : DBusNames.appInterface, names: names)
            }
            for job in changes.finishedJobs {
                dispatcher.propertiesChanged(path: job.path, interface: DBusNames.jobInterface, names: ["Finished", "Outcome", "ErrorCode"])
                dispatcher.emit(.syncFinished(app: job.app, outcome: job.outcome, errorCode: job.errorCode, job: job.path))
            }
        }
    }

    // MARK: - Objects and properties (bus thread)

    func exists(_ object: Int32, _ id: String) -> Bool {
        switch object {
        case Int32(C_SDBUS_APP.rawValue): state.withLock { $0.snapshots[id] != nil }
        case Int32(C_SDBUS_JOB.rawValue): UInt64(id).map { number in state.withLock { $0.jobs[number] != nil } } ?? false
        default: false
        }
    }

    func ids(_ object: Int32) -> [String] {
        switch object {
        case Int32(C_SDBUS_APP.rawValue): state.withLock { $0.snapshots.keys.sorted() }
        case Int32(C_SDBUS_JOB.rawValue): state.withLock { $0.jobs.keys.sorted().map(String.init) }
        default: []
        }
    }

    func property(_ object: Int32, _ id: String, _ name: String) -> BusValue? {
        switch object {
        case Int32(C_SDBUS_MANAGER.rawValue):
            switch name {
            case "Version": return .string(AgentVersion.current)
            case "Root": return .string(configuration.root)
            case "Apps": return .paths(ids(object: Int32(C_SDBUS_APP.rawValue)).map(DBusNames.appPath))
            default: return nil
            }
        case Int32(C_SDBUS_APP.rawValue): return state.withLock { $0.snapshots[id] }?.property(name)
        case Int32(C_SDBUS_JOB.rawValue): return UInt64(id).flatMap { number in state.withLock { $0.jobs[number] } }?.property(name)
        default: return nil
        }
    }

    private func ids(object: Int32) -> [String] { ids(object) }

    /// Whether user `uid` (in groups `gids`) may confirm, report bad and sync `app`:
    /// root, the service's own user, and the users and groups the config names for it.
    func allows(app: String, uid: UInt32, gids: [UInt32]) -> Bool {
        uid == 0 || uid == getuid() || configuration.access[app]?.allows(uid: uid, gids: gids) == true
    }

    // MARK: - Methods

    func answer(_ request: BusRequest) -> BusAnswer {
        switch request {
        case .getApp(let name):
            guard AppName.isValid(name) else { return .now(.failure(.usage("invalid app name"))) }
            guard exists(Int32(C_SDBUS_APP.rawValue), name) else {
                return .now(.failure(BusError(OfflineAgentError(.lifecycle, "no version of '\(name)' is installed in this root", cause: .stateInvalid))))
            }
            return .now(.success([.path(DBusNames.appPath(name))]))
        case .status(let app):
            let status = configuration.status
            return .later {
                do { return .success([.string(try await status(app))]) } catch { return .failure(BusError(any: error)) }
            }
        case .resolve(let app, let url):
            return .now(resolve(app: app, url: url))
        case .resolveFile(let app, let url):
            return .now(resolveFile(app: app, url: url))
        case .confirm(let app, let text):
            guard let version = Version(text) else { return .now(.failure(.usage("'\(text)' is not a version"))) }
            return later { lifecycle in
                try lifecycle.markGood(app, version: version)
                return []
            }
        case .reportBad(let app, let text, let reason):
            guard let version = Version(text) else { return .now(.failure(.usage("'\(text)' is not a version"))) }
            guard !reason.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
                return .now(.failure(.usage("the reason holds control characters")))
            }
            return later { lifecycle in
                let transition = try lifecycle.markBad(app, version: version, reason: reason.isEmpty ? "reported failing" : reason)
                return [.string(transition.to?.description ?? "")]
            }
        case .sync(let app, let force):
            return .now(sync(app: app, force: force))
        }
    }

    /// A lifecycle change on the blocking pool (it may wait for the app's lifecycle lock),
    /// then a reading of the root, so properties and signals follow at once.
    private func later(_ body: @escaping @Sendable (Lifecycle) throws -> [BusValue]) -> BusAnswer {
        let lifecycle = Lifecycle(store: store)
        return .later { [self] in
            do {
                let values = try await NIOThreadPool.singleton.runIfActive { try body(lifecycle) }
                await refreshed()
                return .success(values)
            } catch {
                return .failure(BusError(any: error))
            }
        }
    }

    /// `Resolve`: where a host loads `url` (the mirror URL on `serve`'s port), with the
    /// version serving it; the URL itself and the fallback reason when it loads from the network.
    func resolve(app: String, url text: String) -> Result<[BusValue], BusError> {
        resolution(app: app, url: text).map { url, resolution, cache, apps in
            switch resolution {
            case .file(let file):
                let location = cache.resolver.mirrorURL(for: url, servePort: configuration.servePort, among: apps) ?? text
                return [.string(location), .string(file.version.description), .string("")]
            case .network(let reason, _):
                return [.string(text), .string(""), .string(reason.rawValue)]
            }
        }
    }

    /// `ResolveFile`: the file that serves `url`, opened, with its MIME type and the version
    /// it belongs to (the descriptor reads that version's bytes whatever is installed
    /// later), decided as `Resolve` decides; `NotOffline` when the URL loads from the network.
    func resolveFile(app: String, url text: String) -> Result<[BusValue], BusError> {
        // Twice at most: a swap and a collection may remove the file between the reading and the open.
        for _ in 0..<2 {
            switch resolution(app: app, url: text) {
            case .failure(let error):
                return .failure(error)
            case .success((_, .network(let reason, _), _, _)):
                return .failure(BusError(
                    name: DBusNames.errorPrefix + "NotOffline",
                    message: "\(reason.rawValue): \(text) is not served offline: load it from the network (Resolve says where)"))
            case .success((_, .file(let file), let cache, _)):
                let fd = open(file.path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
                var info = stat()
                guard fd >= 0 else { cache.invalidate(); continue }
                guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else {
                    close(fd)
                    return .failure(BusError(OfflineAgentError(.serve, "\(file.path) is not a regular file", cause: .unexpected)))
                }
                return .success([.file(fd), .string(configuration.contentType(file.path)), .string(file.version.description)])
            }
        }
        return .failure(BusError(OfflineAgentError(.serve, "the file for \(text) changed twice while it was opened", cause: .busy)))
    }

    /// How `url` resolves among the apps as the service last read them (`ResolveCache`),
    /// checked for `app`: a URL of another app's whitelist is refused with `WrongApp`.
    private func resolution(app: String, url text: String)
        -> Result<(url: URL, resolution: Resolution, cache: ResolveCache, apps: [ResolvableApp]), BusError>
    {
        guard let url = URL(string: text), url.scheme != nil, url.host != nil else { return .failure(.usage("invalid URL")) }
        let cache: ResolveCache
        do { cache = try resolveCache.withLock { kept in
            if let kept { return kept }
            let made = ResolveCache(resolver: Resolver(store: store, deviceID: try configuration.deviceID ?? DeviceID.load(root: store.root)))
            kept = made
            return made
        } } catch { return .failure(BusError(any: error)) }
        let apps = cache.apps()
        let resolution = cache.resolver.resolve(url, among: apps)
        let owner: String? = switch resolution {
        case .file(let file): file.app
        case .network(_, let owner): owner
        }
        if let owner, owner != app {
            return .failure(BusError(OfflineAgentError(.usage, "the URL belongs to app '\(owner)', not '\(app)'", cause: .wrongApp)))
        }
        return .success((url, resolution, cache, apps))
    }

    /// `Sync`: a job object at once; the sync runs in a task and ends with `SyncFinished`.
    /// A second `Sync` of an app while one runs answers the running job.
    func sync(app: String, force: Bool) -> Result<[BusValue], BusError> {
        guard var request = configuration.syncs[app] else {
            return .failure(BusError(OfflineAgentError(
                .usage, "no manifest is configured for '\(app)' (serve --config FILE names the apps it syncs)", cause: .usage)))
        }
        request.options.force = force
        let (job, started) = state.withLock { state -> (SyncJob, Bool) in
            if let running = state.syncing[app], let job = state.jobs[running] { return (job, false) }
            state.nextJob &+= 1
            let job = SyncJob(number: state.nextJob, app: app)
            state.jobs[job.number] = job
            state.syncing[app] = job.number
            let finished = state.jobs.values.filter(\.finished).map(\.number).sorted()
            for number in finished.dropLast(Self.keptJobs) { state.jobs[number] = nil }
            return (job, true)
        }
        if started {
            Task { [self] in
                let report = await agent.sync(app: request.app, manifest: request.manifest, options: request.options)
                state.withLock { state in
                    state.jobs[job.number]?.finished = true
                    state.jobs[job.number]?.outcome = report.result.rawValue
                    state.jobs[job.number]?.errorCode = report.error?.cause.rawValue ?? ""
                    state.finishing[app] = job.number
                }
                rootChanged(full: true)
            }
        }
        return .success([.path(job.path)])
    }
}
