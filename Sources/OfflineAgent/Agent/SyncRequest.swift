import FoundationEssentials

/// One app to sync in a batch (`Agent.sync(_:concurrency:)`).
public struct SyncRequest: Sendable {
    /// The app to sync.
    public var app: String
    /// Its manifest URL.
    public var manifest: URL
    /// The options of its sync.
    public var options: SyncOptions

    /// One app of a batch.
    public init(app: String, manifest: URL, options: SyncOptions = SyncOptions()) {
        self.app = app
        self.manifest = manifest
        self.options = options
    }
}
