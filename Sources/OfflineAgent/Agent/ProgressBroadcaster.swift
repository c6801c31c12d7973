import Synchronization

/// Hands every progress event of an agent to every subscriber of `Agent.events`.
///
/// One `AsyncStream` per subscriber: a single stream's events are split between the
/// tasks iterating it, so two readers would each see half a sync. A subscriber whose
/// stream ends (its task cancelled, the stream dropped) is removed; `finish` ends
/// them all and every later subscription is born finished, so no reader waits forever.
final class ProgressBroadcaster: Sendable {
    private struct State {
        var nextID = 0
        var subscribers: [Int: AsyncStream<ProgressEvent>.Continuation] = [:]
        var finished = false
    }

    /// Events a subscriber that does not keep up may have waiting; the oldest go first,
    /// so a stalled reader costs bounded memory and still sees how each sync ended.
    static let bufferSize = 256

    private let state = Mutex(State())

    /// The number of live subscribers (for tests).
    var count: Int { state.withLock { $0.subscribers.count } }

    /// A new stream of every event from now on.
    func subscribe() -> AsyncStream<ProgressEvent> {
        let (stream, continuation) = Self.makeStream()
        let id = state.withLock { state in
            defer { state.nextID += 1 }
            return state.nextID
        }
        // Set before registering: a stream that ends at once must still be removed.
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.subscribers.removeValue(forKey: id) }
        }
        let registered = state.withLock { state in
            guard !state.finished else { return false }
            state.subscribers[id] = continuation
            return true
        }
        if !registered { continuation.finish() }
        return stream
    }

    func yield(_ event: ProgressEvent) {
        // Yield outside the lock: a subscriber's termination handler takes it.
        let subscribers = state.withLock { Array($0.subscribers.values) }
        for subscriber in subscribers { subscriber.yield(event) }
    }

    /// Ends every stream, now and for later subscribers.
    func finish() {
        let subscribers = state.withLock { state in
            state.finished = true
            defer { state.subscribers = [:] }
            return Array(state.subscribers.values)
        }
        for subscriber in subscribers { subscriber.finish() }
    }

    /// A stream with the subscribers' bounded buffer, also for per-sync streams.
    static func makeStream() -> (AsyncStream<ProgressEvent>, AsyncStream<ProgressEvent>.Continuation) {
        AsyncStream.makeStream(of: ProgressEvent.self, bufferingPolicy: .bufferingNewest(bufferSize))
    }
}
