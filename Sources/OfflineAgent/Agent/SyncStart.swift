import FoundationEssentials

/// How the locked, local start of a sync ended: throttled after all (another run just
/// checked), or ready for the network with the lock held.
enum SyncStart: Sendable {
    case throttled(until: Date)
    /// `lastChecked`: the last check before this one, put back when the sync is cancelled.
    case ready(lock: RootLock, check: CheckState, failures: BackoffState?, installed: InstalledVersion?, lastChecked: Date?)
}
