/// What one flush of a root's report queues did.
package struct ReportFlush: Sendable, Equatable {
    /// Events the collectors acknowledged.
    package var delivered = 0
    /// Events in batches a collector refused (400, 413), dropped.
    package var rejected = 0
    /// Collectors that could not be reached or asked to wait; their events stay queued.
    package var failed: [String] = []

    package init() {}
}
