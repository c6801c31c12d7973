import Synchronization
@testable import OfflineAgent

/// Collects the events a `progress:` handler receives, from whichever thread calls it.
final class Recorder: Sendable {
    private let state = Mutex<[ProgressEvent]>([])

    func add(_ event: ProgressEvent) { state.withLock { $0.append(event) } }

    var events: [ProgressEvent] { state.withLock { $0 } }
}
