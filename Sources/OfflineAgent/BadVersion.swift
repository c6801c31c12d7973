import Foundation

/// A version marked bad on this device, and why: syncs never install it again.
public struct BadVersion: Sendable, Equatable, Codable {
    public var version: Version
    public var reason: String
    public var at: Date

    public init(version: Version, reason: String, at: Date) {
        self.version = version
        self.reason = reason
        self.at = at
    }
}
