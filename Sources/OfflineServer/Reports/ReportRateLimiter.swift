import Foundation
import Synchronization

/// Token buckets keyed by sender (an authenticated device id, or a source address when
/// that limit is asked for): `burst` requests at once, then `perMinute` a minute.
///
/// Memory is bounded: past `maxTracked` keys the least recently seen eighth is forgotten
/// (a forgotten key starts again with a full bucket, which is what an idle one has).
final class ReportRateLimiter: Sendable {
    let burst: Double
    let perSecond: Double
    let maxTracked: Int
    private let buckets = Mutex<[String: Bucket]>([:])

    private struct Bucket {
        var tokens: Double
        var updated: ContinuousClock.Instant
    }

    init(_ limit: ReportRateLimit, maxTracked: Int = 100_000) {
        burst = Double(max(1, limit.burst))
        perSecond = Double(max(1, limit.perMinute)) / 60
        self.maxTracked = max(1, maxTracked)
    }

    /// Takes one request's token for `key`: nil when allowed, else the whole seconds
    /// until one is there (the `Retry-After`).
    func take(_ key: String, now: ContinuousClock.Instant = .now) -> Int? {
        buckets.withLock { buckets in
            var bucket: Bucket
            if let known = buckets[key] {
                bucket = known
                let elapsed = now - known.updated
                let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
                bucket.tokens = min(burst, bucket.tokens + max(0, seconds) * perSecond)
            } else {
                if buckets.count >= maxTracked { Self.forgetOldest(&buckets, keep: maxTracked - max(1, maxTracked / 8)) }
                bucket = Bucket(tokens: burst, updated: now)
            }
            bucket.updated = now
            defer { buckets[key] = bucket }
            guard bucket.tokens >= 1 else { return max(1, Int(((1 - bucket.tokens) / perSecond).rounded(.up))) }
            bucket.tokens -= 1
            return nil
        }
    }

    /// Keys tracked now.
    var tracked: Int { buckets.withLock { $0.count } }

    private static func forgetOldest(_ buckets: inout [String: Bucket], keep: Int) {
        let kept = buckets.sorted { $0.value.updated > $1.value.updated }.prefix(max(0, keep))
        buckets = Dictionary(uniqueKeysWithValues: kept.map { ($0.key, $0.value) })
    }
}
