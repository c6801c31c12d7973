import FoundationEssentials

/// How long an app waits after consecutive failed checks: `base × 2^(n−1)`, at most
/// `cap`, spread by ±`jitter` so a fleet that failed together does not retry together.
public struct Backoff: Sendable, Equatable {
    /// The wait after the first failure (5 minutes).
    public var base: TimeInterval = 300
    /// The longest wait (6 hours).
    public var cap: TimeInterval = 6 * 3600
    /// The fraction the wait is spread by, either way (10 %).
    public var jitter = 0.1

    /// A backoff of `base` after the first failure, doubling up to `cap`, spread by ±`jitter`.
    public init(base: TimeInterval = 300, cap: TimeInterval = 6 * 3600, jitter: Double = 0.1) {
        self.base = base
        self.cap = cap
        self.jitter = jitter
    }

    /// The wait after `failures` consecutive failures; `spread` in −1…1 picks the jitter.
    public func delay(failures: Int, spread: Double) -> TimeInterval {
        guard failures > 0 else { return 0 }
        // 2^(n−1) overflows nothing: past 2^20 the cap has long been reached.
        let doubled = base * Double(1 << min(failures - 1, 20))
        return min(doubled, cap) * (1 + jitter * max(-1, min(1, spread)))
    }

    /// The longest wait any failure count can produce; a recorded wait beyond it came from a wrong clock.
    var longest: TimeInterval { cap * (1 + jitter) }
}
