import FoundationEssentials

/// `<root>/reports/<key>/state.json`: which segment file holds the queue, how much of
/// it was acknowledged, what was dropped, and the delivery backoff. Replaced atomically.
package struct ReportQueueState: Sendable, Codable, Equatable {
    /// The current segment: `queue-<segment>.jsonl`.
    package var segment = 0
    /// Bytes of the segment already delivered (or dropped): the queue starts here.
    package var offset = 0
    /// Bytes of all earlier segments: positions `base + offset` never go back.
    package var base = 0
    /// Events dropped unsent because the queue was full (oldest first).
    package var dropped = 0
    /// Events in batches the collector refused with 400 or 413, dropped.
    package var rejected = 0
    /// Events the collector acknowledged.
    package var delivered = 0
    /// Consecutive failed deliveries.
    package var failures = 0
    /// No delivery before this time (seconds since 1970), after a failure.
    package var nextAttempt: Double?

    package init() {}
}
