import FoundationEssentials

/// The fleet-report queue of one app, as `status --json` shows it.
package struct ReportQueueStatus: Sendable, Encodable {
    /// The collector.
    package var url: String
    /// Events waiting to be sent.
    package var pending: Int
    /// Events dropped unsent because the queue was full.
    package var dropped: Int
    /// Events in batches the collector refused (400, 413).
    package var rejected: Int
    /// Consecutive failed deliveries (the backoff's count).
    package var failures: Int

    /// The queue `app`'s syncs report to; nil when they do not.
    package init?(root: String, app: String) {
        guard let url = ReportDestinations.url(root: root, app: app) else { return nil }
        let queue = ReportQueue(root: root, url: url, maxEvents: ReportSettings().maxQueuedEvents)
        let state = queue.loadState()
        self.url = url.absoluteString
        pending = queue.pending()
        dropped = state.dropped
        rejected = state.rejected
        failures = state.failures
    }
}
