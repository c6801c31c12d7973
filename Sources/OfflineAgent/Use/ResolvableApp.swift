/// What `Resolver.resolve` reads of one app to answer for it: its active version, whether
/// that version is marked bad, and why it is not used offline.
///
/// `Resolver.activeApps()` reads them from the root; a long-running host that keeps them
/// (the D-Bus service, while the files they come from are unchanged) passes them to
/// `Resolver.resolve(_:among:)`, which then reads only the file a URL names.
public struct ResolvableApp: Sendable, Equatable {
    /// The app.
    public let app: String
    /// Its active version's record.
    public let installed: InstalledVersion
    /// The active version is marked bad (`Lifecycle.isBad`): it is not served offline.
    public let bad: Bool
    /// Why the active version is not used offline (`Resolver.fallbackReason`); nil when it is.
    public let fallback: FallbackReason?

    /// The facts of `app` as given.
    public init(app: String, installed: InstalledVersion, bad: Bool, fallback: FallbackReason?) {
        self.app = app
        self.installed = installed
        self.bad = bad
        self.fallback = fallback
    }
}
