import FoundationEssentials

/// Per-call options of `Agent.sync`.
public struct SyncOptions: Sendable {
    /// Check now: skip the 5-minute throttle, any `Retry-After` wait and the failure backoff.
    public var force = false
    /// Base64 Ed25519 public key; when set, every manifest must carry a valid signature.
    public var publicKey: String?
    /// More trusted keys (rotation): a manifest signed by any of `publicKey` and these verifies.
    public var publicKeys: [String] = []
    /// The device's network; `wifi` manifests are deferred on `.metered`.
    public var network: NetworkKind = .unmetered
    /// The cookie profile whose jar the sync's requests carry and fill (see `CookieProfile`).
    public var profile: String = CookieProfile.defaultName
    /// Whether the manifest request carries `app` and `current` (PROTOCOL.md). Turn it off
    /// for a static manifest behind a CDN: the parameters would give every installed
    /// version its own cache entry, and a static file ignores them anyway.
    public var manifestQuery = true

    /// Options for one sync; the defaults check within the throttle, unsigned, on an unmetered network, with the default cookie profile.
    public init(
        force: Bool = false, publicKey: String? = nil, publicKeys: [String] = [], network: NetworkKind = .unmetered,
        profile: String = CookieProfile.defaultName, manifestQuery: Bool = true
    ) {
        self.force = force
        self.publicKey = publicKey
        self.publicKeys = publicKeys
        self.network = network
        self.profile = profile
        self.manifestQuery = manifestQuery
    }

    /// Every trusted key, `publicKey` first.
    var trustedKeys: [String] { (publicKey.map { [$0] } ?? []) + publicKeys }
}
