/// A sync running in its own task, started by `Agent.startSync`: its progress as it
/// happens, then its outcome.
///
/// ```swift
/// let sync = agent.startSync(SyncRequest(app: "mall", manifest: manifestURL))
/// for await event in sync.events { show(event) }   // ends when the sync does
/// let report = await sync.value
/// ```
/// Like `URLSessionTask`, the sync runs whether or not anyone reads `events`; `cancel()`
/// stops it, and a cancelled sync reports the `cancelled` cause with nothing installed changed.
public struct SyncTask<Output: Sendable>: Sendable {
    /// This sync's events only (every app's, for a batch), ending with `.done`; the
    /// stream finishes when the sync ends: after success, failure or cancellation.
    ///
    /// Meant for one reader (a second would share, not copy, the events). A reader that
    /// falls far behind loses the oldest events first, never the last ones.
    public let events: AsyncStream<ProgressEvent>
    private let task: Task<Output, Never>

    init(events: AsyncStream<ProgressEvent>, task: Task<Output, Never>) {
        self.events = events
        self.task = task
    }

    /// The sync's outcome (a `SyncReport`, or one per request for a batch), once it ends.
    public var value: Output {
        get async { await task.value }
    }

    /// Cancels the sync: work not yet started is skipped and the sync ends with the
    /// `cancelled` cause; an extraction or patch already running completes first, so
    /// nothing is left half done.
    public func cancel() {
        task.cancel()
    }

    /// True once `cancel()` was called.
    public var isCancelled: Bool { task.isCancelled }
}
