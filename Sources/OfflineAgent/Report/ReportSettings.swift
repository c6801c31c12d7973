import FoundationEssentials

/// How the agent queues and sends fleet reports.
public struct ReportSettings: Sendable {
    /// The longest one report request may take, from connecting to the collector's
    /// answer; a request past it fails, its events stay queued and the queue backs off.
    /// A flush sends at most the batches its queues held when it began, so a collector that
    /// stalls costs a sync one deadline per queue. 3 seconds.
    public var deadline: Duration = .seconds(3)
    /// Events kept per destination; past it the oldest are dropped and counted. 1000.
    public var maxQueuedEvents = 1000
    /// Events per request (the wire format allows 1 to 500).
    public var batchSize = 500
    /// The wait after a failed delivery (a down collector, 429, 503), doubling per
    /// failure: 1 minute up to 1 hour. A `Retry-After` further ahead wins.
    public var backoff = Backoff(base: 60, cap: 3600, jitter: 0.1)

    /// The defaults described on each property.
    public init() {}

    /// The wire format's cap on a request body.
    static let maxBodyBytes = 1 << 20
}
