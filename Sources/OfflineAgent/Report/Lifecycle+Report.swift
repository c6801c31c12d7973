import FoundationEssentials

extension Lifecycle {
    /// Queues a fleet-report event for each transition `history` gained over `before`
    /// (mark good, mark bad, rollbacks; installs are the sync's `updated`), when the
    /// app's syncs report (`ReportDestinations`). Sent by the next sync or `serve` flush.
    /// A report that cannot be queued never fails the transition.
    func queueReports(_ app: String, _ history: [LifecycleEvent], after before: [LifecycleEvent]) {
        var added = history[...]
        if let last = before.last, let index = history.lastIndex(of: last) { added = history[(index + 1)...] }
        let root = store.root
        let kinds: [(LifecycleEvent, ReportEvent.Kind)] = added.compactMap { entry in
            switch entry.event {
            case .confirm: (entry, .markedGood)
            case .markBad: (entry, .markedBad)
            case .rollback, .automaticRollback: (entry, .rolledBack)
            case .install, .hold, .unhold, .forgetBad: nil
            }
        }
        guard !kinds.isEmpty, let url = ReportDestinations.url(root: root, app: app), let device = try? DeviceID.load(root: root) else {
            return
        }
        let events = kinds.map { entry, kind in
            ReportEvent(
                time: entry.at, device: device, app: app, event: kind, version: entry.to?.description,
                previousVersion: entry.from?.description, message: entry.reason)
        }
        try? ReportQueue(root: root, url: url, maxEvents: ReportSettings().maxQueuedEvents).append(events)
    }
}
