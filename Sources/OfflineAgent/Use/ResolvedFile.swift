import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// A URL served from an active package: the file, and what it belongs to.
public struct ResolvedFile: Sendable, Equatable {
    /// The app whose whitelist matched.
    public var app: String
    /// The active version the file belongs to.
    public var version: Version
    /// Absolute path of the file inside the version directory.
    public var path: String
    /// The version directory the path lives in (pinned for the whole request).
    public var versionDirectory: String
    /// The percent-encoded path relative to the app root (the whitelist prefix removed).
    public var relativePath: String
}
