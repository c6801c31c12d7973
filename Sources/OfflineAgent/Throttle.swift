import Foundation

/// One manifest check per app per interval, and no check before a server's `Retry-After`.
public struct Throttle: Sendable, Equatable {
    /// The shortest time between two checks of one app (5 minutes).
    public var interval: TimeInterval = 300

    public init(interval: TimeInterval = 300) {
        self.interval = interval
    }

    /// When the next check may happen, or nil when it may happen now.
    func nextCheck(after state: CheckState, now: Date, force: Bool) -> Date? {
        if let notBefore = state.notBefore, notBefore > now {
            // The server's wish holds even for a forced check.
            return notBefore
        }
        guard !force, let last = state.lastCheck else { return nil }
        let next = last.addingTimeInterval(interval)
        // A clock set back must not freeze checks for long: treat a future lastCheck as stale.
        if last > now.addingTimeInterval(60) { return nil }
        return next > now ? next : nil
    }
}
