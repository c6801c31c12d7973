/// A rate limit on `POST /report`: `burst` requests at once, then `perMinute` a minute.
public struct ReportRateLimit: Sendable, Equatable {
    /// Requests allowed at once.
    public var burst: Int
    /// Requests a minute after the burst.
    public var perMinute: Int

    public init(burst: Int, perMinute: Int) {
        self.burst = max(1, burst)
        self.perMinute = max(1, perMinute)
    }

    /// The per-device default: 60 requests at once, then 60 a minute. A device sends one
    /// or two a sync, so only a device that floods meets it.
    public static let perDevice = ReportRateLimit(burst: 60, perMinute: 60)

    /// `N` (burst and per minute both N) or `BURST/PERMINUTE`; nil when malformed.
    public init?(parsing text: String) {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard (1...2).contains(parts.count), let burst = Int(parts[0]), burst > 0, burst <= 1_000_000,
              let perMinute = parts.count == 2 ? Int(parts[1]) : burst, perMinute > 0, perMinute <= 1_000_000 else { return nil }
        self.init(burst: burst, perMinute: perMinute)
    }
}
