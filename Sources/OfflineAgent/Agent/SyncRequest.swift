import FoundationEssentials

/// One app to sync in a batch (`Agent.sync(_:concurrency:)`).
public struct SyncRequest: Sendable {
    public var app: String
    public var manifest: URL
    public var options: SyncOptions

    public init(app: String, manifest: URL, options: SyncOptions = SyncOptions()) {
        self.app = app
        self.manifest = manifest
        self.options = options
    }
}
