import FoundationEssentials
import Logging
import OfflineAgent
import OfflineDBus
import OfflineServe
import Synchronization
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

/// `serve --dbus`: the D-Bus service beside the HTTP server, started once the server
/// listens (`Resolve` answers URLs on its port) and stopped after it.
final class DBusHost: Sendable {
    private let service = Mutex<Task<AgentBusService?, Never>?>(nil)

    /// The apps `Sync` syncs and who may change each, from `serve --config FILE`.
    static func configuration(
        bus: AgentBusConfiguration.Bus, root: String, port: Int, deviceID: String?, config: String?
    ) throws -> AgentBusConfiguration {
        var syncs: [String: SyncRequest] = [:]
        var access: [String: AppAccess] = [:]
        if let config {
            for job in try SyncCommand.parse(["--config", config]).loadJobs() {
                guard URL(fileURLWithPath: job.root).standardizedFileURL == URL(fileURLWithPath: root).standardizedFileURL else {
                    throw OfflineAgentError(.usage, "the config's root \(job.root) is not serve's --root \(root)", path: config)
                }
                syncs[job.app] = SyncRequest(app: job.app, manifest: job.manifest, options: job.options(force: false))
            }
            for entry in try ConfigFile.load(config, fallbackKeys: [], allowUnsigned: true).entries {
                access[entry.app] = AppAccess(
                    users: Set(try entry.dbusUsers.map { try Self.id(user: $0, config: config) }),
                    groups: Set(try entry.dbusGroups.map { try Self.id(group: $0, config: config) }))
            }
        }
        let agentRoot = URL(fileURLWithPath: root)
        var configuration = AgentBusConfiguration(
            bus: bus, root: root, servePort: port, deviceID: deviceID, syncs: syncs, access: access,
            status: { app in try await StatusCommand.json(Agent(root: agentRoot), app: app, deviceID: deviceID) })
        // ResolveFile's MIME types are serve's.
        configuration.contentType = { LocalContentType.of(path: $0) }
        return configuration
    }

    /// Starts the service in the background; a failure to start ends `serve` with status 1
    /// (a daemon asked for a bus name it cannot own must say so, not serve without it).
    func start(_ configuration: AgentBusConfiguration, logger: Logger) {
        service.withLock { service in
            service = Task {
                do {
                    let started = try await AgentBusService.start(configuration, logger: logger)
                    fputs("dbus: \(DBusNames.busName) on the \(configuration.bus.rawValue) bus\n", stdout)
                    fflush(stdout)
                    return started
                } catch {
                    fputs("offline-agent: serve: D-Bus: \(error)\n", stderr)
                    exit(1)
                }
            }
        }
    }

    func stop() async {
        guard let task = service.withLock({ $0 }) else { return }
        await task.value?.stop()
    }

    private static func id(user: String, config: String) throws -> UInt32 {
        if let id = UInt32(user) { return id }
        guard let entry = getpwnam(user) else { throw OfflineAgentError(.usage, "dbusUsers: no user '\(user)' on this system", path: config) }
        return entry.pointee.pw_uid
    }

    private static func id(group: String, config: String) throws -> UInt32 {
        if let id = UInt32(group) { return id }
        guard let entry = getgrnam(group) else { throw OfflineAgentError(.usage, "dbusGroups: no group '\(group)' on this system", path: config) }
        return entry.pointee.gr_gid
    }
}
