import FoundationEssentials
import Logging

/// Per-call options of `Agent.sync`.
public struct SyncOptions: Sendable {
    /// Check now: skip the 5-minute throttle, any `Retry-After` wait and the failure backoff.
    public var force = false
    /// Base64 Ed25519 public key; when set, every manifest must carry a valid signature.
    public var publicKey: String?
    /// More trusted keys (rotation): a manifest signed by any of `publicKey` and these verifies.
    public var publicKeys: [String] = []
    /// The bytes of a TUF root (`metadata/1.root.json` of the publish directory) the
    /// app's repository is bootstrapped from; when set, the manifest URL must be
    /// `<base>/APP/manifest.json`, the sync follows the TUF client workflow
    /// (`docs/PROTOCOL.md`, "TUF repository") and `publicKey`/`publicKeys` are not read.
    /// The root persisted under the agent's root wins once it is newer.
    public var trustedRoot: Data?
    /// The device's network; `wifi` manifests are deferred on `.metered`.
    public var network: NetworkKind = .unmetered
    /// How `network` is decided; nil: `network` as given. `.auto` asks NetworkManager
    /// (`MeteredNetwork`) when a manifest wants an unmetered network, and assumes
    /// unmetered, with one log line, where that cannot be read; `.metered` and
    /// `.unmetered` win over `network`.
    public var networkPolicy: NetworkPolicy?
    /// The cookie profile whose jar the sync's requests carry and fill (see `CookieProfile`).
    public var profile: String = CookieProfile.defaultName
    /// Whether the manifest request carries `app` and `current` (PROTOCOL.md). Turn it off
    /// for a static manifest behind a CDN: the parameters would give every installed
    /// version its own cache entry, and a static file ignores them anyway.
    public var manifestQuery = true
    /// The collector this sync's fleet-report event goes to (docs/PROTOCOL.md, "Fleet
    /// reports"); nil: `AgentConfiguration.report`. The URL is remembered per app, so
    /// later lifecycle transitions (mark good or bad, rollbacks) go there too.
    public var report: URL?
    /// The bearer token of the collector this sync reports to (`offline-server
    /// --report-token`; 1 to 512 visible ASCII characters, `ReportToken.rule`); nil: with
    /// `report` nil, `AgentConfiguration.reportToken`. The sync records it with that
    /// collector's queue (mode 0600), so later lifecycle transitions and `serve`'s usage
    /// reports send it too; a sync reporting there without a token removes the recorded
    /// one. It is sent to that URL only, and never logged. An invalid token is not
    /// recorded (one log line).
    public var reportToken: String?
    /// This app's trial setting for the version the sync installs; nil:
    /// `AgentConfiguration.maxTrialLaunches` (see there: nil follows the manifest's
    /// request, 0 turns trials off, N > 0 turns them on for a host that confirms).
    public var maxTrialLaunches: Int?
    /// The device id that places this device in a staged rollout (its bucket,
    /// docs/PROTOCOL.md "Staged rollout"); nil: the root's stable `<root>/device-id`.
    /// Give the same id as to `resolve`/`serve` when the host app chooses it.
    public var deviceID: String?
    /// The origins (`https://h5.example.com`, or any URL on one) this app's whitelist may
    /// name on this device (`docs/PROTOCOL.md`, "Who claims an origin"); nil: the origins
    /// of its installed whitelist, or any origin for its first install. Whatever this
    /// says, an origin another installed app holds is refused (`origin-claimed`).
    public var allowedOrigins: [String]?

    /// Options for one sync; the defaults check within the throttle, unsigned, on an unmetered network, with the default cookie profile.
    public init(
        force: Bool = false, publicKey: String? = nil, publicKeys: [String] = [], network: NetworkKind = .unmetered,
        profile: String = CookieProfile.defaultName, manifestQuery: Bool = true, report: URL? = nil
    ) {
        self.report = report
        self.force = force
        self.publicKey = publicKey
        self.publicKeys = publicKeys
        self.network = network
        self.profile = profile
        self.manifestQuery = manifestQuery
    }

    /// The network kind by `networkPolicy`, reading the system for `.auto`.
    func networkKind(logger: Logger) -> NetworkKind {
        guard let networkPolicy else { return network }
        return networkPolicy.fixed ?? MeteredNetwork.detect(logger: logger)
    }

    /// Every trusted key, `publicKey` first.
    var trustedKeys: [String] { (publicKey.map { [$0] } ?? []) + publicKeys }
}
