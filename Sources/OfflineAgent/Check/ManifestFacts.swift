import FoundationEssentials

/// What `ManifestDecision.decide` decides from: plain values, nil while not learned.
struct ManifestFacts: Sendable {
    /// The verified manifest.
    var manifest: Manifest
    /// The active version's record; nil when nothing is installed.
    var installed: InstalledVersion?
    /// The device's clock, for the stage schedule.
    var now: Date
    /// The highest epoch this device accepted (`CheckState.knownEpoch`, 0 when none).
    var knownEpoch: Int = 0
    /// The epoch the installed version came with (`ManifestDecision.installedEpoch`).
    var installedEpoch: Int = 0
    /// The lifecycle's refusal of the offered version (`held`, `knownBad`, or none: `.some(nil)`); nil while not learned.
    var lifecycleRefusal: SyncResult??
    /// `OriginClaims.refusal` of the manifest's whitelist (`.some(nil)`: the claim is allowed); nil while not learned.
    var originRefusal: OfflineAgentError??
    /// The device's rollout bucket for the app (1…100, `Resolver.rolloutBucket`); nil while not learned.
    var bucket: Int?
    /// The kind of network the device is on; nil while not learned.
    var network: NetworkKind?

    init(manifest: Manifest, installed: InstalledVersion?, now: Date, knownEpoch: Int = 0, installedEpoch: Int = 0,
         lifecycleRefusal: SyncResult?? = nil, originRefusal: OfflineAgentError?? = nil, bucket: Int? = nil, network: NetworkKind? = nil) {
        self.manifest = manifest
        self.installed = installed
        self.now = now
        self.knownEpoch = knownEpoch
        self.installedEpoch = installedEpoch
        self.lifecycleRefusal = lifecycleRefusal
        self.originRefusal = originRefusal
        self.bucket = bucket
        self.network = network
    }
}
