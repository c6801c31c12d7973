import FoundationEssentials

/// One manifest check per app per interval, and no check before a server's `Retry-After`.
///
/// Instants recorded while the clock was wrong are not trusted: a `notBefore` more than
/// `maxAhead` after now is clamped to `maxAhead`, a `lastCheck` in the future is ignored,
/// so a clock that ran years fast cannot freeze updates once it is corrected.
public struct Throttle: Sendable, Equatable {
    /// The shortest time between two checks of one app (5 minutes).
    public var interval: TimeInterval = 300
    /// No recorded instant holds checks back longer than this (24 h, the `Retry-After` cap).
    public static let maxAhead: TimeInterval = 86_400
    /// A `lastCheck` this far ahead of now is clock jitter, not a wrong clock.
    static let tolerance: TimeInterval = 60

    /// A throttle allowing one check per `interval` seconds.
    public init(interval: TimeInterval = 300) {
        self.interval = interval
    }

    /// `state` with the instants a wrong clock left behind distrusted: the caller persists
    /// the result when it differs, so a clamped `notBefore` does not slide with the clock.
    func sanitized(_ state: CheckState, now: Date) -> CheckState {
        var state = state
        if let last = state.lastCheck, last > now.addingTimeInterval(Self.tolerance) {
            // The clock was set back (or ran fast when this was written): check again now.
            state.lastCheck = nil
        }
        let cap = now.addingTimeInterval(Self.maxAhead)
        if let notBefore = state.notBefore, notBefore > cap {
            state.notBefore = cap
        }
        return state
    }

    /// When the next check may happen, or nil when it may happen now. `force` always checks.
    ///
    /// A backoff wait longer than `backoff` can produce was written by a wrong clock and is ignored.
    /// Why the check waits until `next` (`nextCheck`): the failure backoff, the server's
    /// `Retry-After`, or the interval since the last check. One phrase, for people.
    func reason(waitingUntil next: Date, state: CheckState, backoff: BackoffState?) -> String {
        if let backoff, backoff.nextCheck == next {
            return "\(backoff.failures) failed check\(backoff.failures == 1 ? "" : "s") in a row, backing off"
        }
        if state.notBefore == next { return "the server asked to wait (Retry-After)" }
        return "checked less than \(Int(interval / 60)) minutes ago"
    }

    func nextCheck(after state: CheckState, backoff: BackoffState? = nil, policy: Backoff = Backoff(), now: Date, force: Bool) -> Date? {
        guard !force else { return nil }
        let state = sanitized(state, now: now)
        var waits: [Date] = []
        if let notBefore = state.notBefore { waits.append(notBefore) }
        if let last = state.lastCheck { waits.append(last.addingTimeInterval(interval)) }
        if let backoff, backoff.nextCheck <= now.addingTimeInterval(policy.longest) { waits.append(backoff.nextCheck) }
        guard let next = waits.max(), next > now else { return nil }
        return next
    }
}
