import FoundationEssentials

/// A version marked bad on this device, and why: syncs never install it again.
public struct BadVersion: Sendable, Equatable, Codable {
    /// The version marked bad.
    public var version: Version
    /// Why, in one line (`mark-bad --reason`, "not confirmed after 3 launches", …).
    public var reason: String
    /// When it was marked bad.
    public var at: Date

    /// A bad version, why and when.
    public init(version: Version, reason: String, at: Date) {
        self.version = version
        self.reason = reason
        self.at = at
    }
}
