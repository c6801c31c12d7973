import FoundationEssentials

/// When one role's metadata expires, and whether that is soon: what `offline-agent
/// status` shows for each trusted repository and `offline-publish` warns about for a
/// publish directory (docs/OPERATIONS.md, "Clocks").
///
/// Soon is within `window(lifetime:)`: an eighth of the metadata's life, at most 7 days
/// (a 7-day timestamp warns in its last 21 hours, a year's root in its last week).
package struct TUFExpiryNotice: Sendable, Equatable, Encodable {
    /// root, targets, snapshot, timestamp, or an app's delegated role (its name).
    package var role: String
    package var version: Int64
    package var expires: Date
    /// Expires within the window (or has expired).
    package var soon: Bool
    package var expired: Bool

    /// The warning window for metadata valid `lifetime` seconds in all.
    package static func window(lifetime: TimeInterval) -> TimeInterval {
        min(7 * 86_400, max(0, lifetime) / 8)
    }

    /// The notice for metadata that expires at `expires` and was valid for `lifetime`.
    package init(role: String, version: Int64, expires: Date, lifetime: TimeInterval, now: Date) {
        self.role = role
        self.version = version
        self.expires = expires
        expired = now >= expires
        soon = expires.timeIntervalSince(now) < Self.window(lifetime: lifetime)
    }

    /// One line: `timestamp v12 expires 2026-01-02T03:04:05Z (in 20 h)`, with a warning when soon.
    package func describe(now: Date) -> String {
        let left = expires.timeIntervalSince(now)
        let when = expired ? "expired" : left >= 2 * 86_400 ? "in \(Int(left / 86_400)) days" : "in \(Int(left / 3_600)) h"
        let line = "\(role) v\(version) expires \(RFC3339.string(from: expires)) (\(when))"
        return soon ? "warning: " + line : line
    }

    private enum CodingKeys: String, CodingKey { case role, version, expires, soon, expired }

    package func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(role, forKey: .role)
        try c.encode(version, forKey: .version)
        try c.encode(RFC3339.string(from: expires), forKey: .expires)
        try c.encode(soon, forKey: .soon)
        try c.encode(expired, forKey: .expired)
    }
}
