import Foundation

/// How long each role's metadata is valid when a publisher signs it, and when it is
/// re-signed ahead of expiry. Long enough for a fleet nobody tends for a while; the
/// timestamp short, since a stolen-and-replayed timestamp freezes devices at most that long.
public struct TUFExpiry: Sendable {
    public var root: TimeInterval = 365 * 86_400
    public var targets: TimeInterval = 90 * 86_400
    public var snapshot: TimeInterval = 90 * 86_400
    public var timestamp: TimeInterval = 7 * 86_400

    public init() {}

    func lifetime(_ role: String) -> TimeInterval {
        switch role {
        case "root": root
        case "targets": targets
        case "snapshot": snapshot
        default: timestamp
        }
    }

    /// Whether metadata of `role` expiring at `expires` is due for re-signing: less than
    /// half its lifetime left (a timestamp of 7 days is renewed after 3.5).
    func isDue(_ role: String, expires: Date, now: Date) -> Bool {
        expires.timeIntervalSince(now) < lifetime(role) / 2
    }
}
