import OfflineAgent

/// What the D-Bus service exports and on which bus (docs/DBUS.md).
public struct AgentBusConfiguration: Sendable {
    /// The bus to own `DBusNames.busName` on.
    public enum Bus: String, Sendable, CaseIterable {
        /// The system bus: the shipped units, any local user's host app.
        case system
        /// The user's session bus: an agent of one user.
        case session
    }

    /// The bus.
    public var bus: Bus
    /// The agent root whose apps are exported.
    public var root: String
    /// The port `serve` listens on: `Resolve` answers URLs on it.
    public var servePort: Int
    /// The device id for rollout; the root's stable id when nil.
    public var deviceID: String?
    /// Each app's sync as its config names it; `Sync` on an app without one is refused.
    public var syncs: [String: SyncRequest]
    /// Who may confirm, report bad and sync each app (besides root and the service's user).
    public var access: [String: AppAccess]
    /// `status --json`'s output for one app, or for all when nil.
    public var status: @Sendable (String?) async throws -> String
    /// How often the root is read again when no change was noticed (a missed inotify event
    /// costs at most this long).
    public var pollInterval: Duration = .seconds(2)
    /// The MIME type `ResolveFile` answers for a file path (`serve`'s, by extension).
    public var contentType: @Sendable (String) -> String = { _ in "application/octet-stream" }

    /// A configuration; `syncs` and `access` from the config file.
    public init(
        bus: Bus, root: String, servePort: Int, deviceID: String? = nil, syncs: [String: SyncRequest] = [:],
        access: [String: AppAccess] = [:], status: @escaping @Sendable (String?) async throws -> String
    ) {
        self.bus = bus
        self.root = root
        self.servePort = servePort
        self.deviceID = deviceID
        self.syncs = syncs
        self.access = access
        self.status = status
    }
}
