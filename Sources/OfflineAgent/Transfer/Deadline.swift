import FoundationEssentials
import Synchronization

/// Runs an operation that must end by a deadline, whatever the peer does.
///
/// AsyncHTTPClient's request deadline stops at the response head: a server trickling
/// the body one byte at a time, just inside the read timeout, would hold a sync (and the
/// root's lock) forever. This race answers at the deadline even if the operation ignores
/// cancellation for a while; the operation is cancelled and its late result dropped.
enum Deadline {
    static func run<T: Sendable>(
        within duration: Duration, expired: @escaping @Sendable () -> OfflineAgentError,
        _ operation: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        let race = Race<T>()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                race.start(continuation, duration: duration, expired: expired, operation: operation)
            }
        } onCancel: {
            race.finish(.failure(CancellationError()))
        }
    }

    /// Formats a duration for a message: "30 s", "1.5 s".
    static func describe(_ duration: Duration) -> String {
        let (seconds, attoseconds) = duration.components
        if attoseconds == 0 { return "\(seconds) s" }
        return "\(Double(seconds) + Double(attoseconds) / 1e18) s"
    }

    private final class Race<T: Sendable>: Sendable {
        private struct State {
            var continuation: CheckedContinuation<T, any Error>?
            var tasks: [Task<Void, Never>] = []
            var finished = false
            var early: Result<T, any Error>?
        }

        private let state = Mutex(State())

        func start(
            _ continuation: CheckedContinuation<T, any Error>, duration: Duration,
            expired: @escaping @Sendable () -> OfflineAgentError, operation: @escaping @Sendable () async throws -> T
        ) {
            // Cancelled before we started: answer at once.
            let early: Result<T, any Error>? = state.withLock { state in
                if let early = state.early { return early }
                state.continuation = continuation
                return nil
            }
            if let early {
                continuation.resume(with: early)
                return
            }
            let end = ContinuousClock.now + duration
            let worker = Task {
                do {
                    finish(.success(try await operation()))
                } catch {
                    // A transport torn down by a deadline of its own (AsyncHTTPClient's, set
                    // to the same instant) may fail as a network error before the timer below
                    // runs: past the deadline, such a failure is the deadline's.
                    finish(.failure(ContinuousClock.now >= end && Self.isTransport(error) ? expired() : error))
                }
            }
            let timer = Task {
                guard (try? await Task.sleep(for: duration)) != nil else { return }
                finish(.failure(expired()))
            }
            let tooLate = state.withLock { state in
                state.tasks = [worker, timer]
                return state.finished
            }
            if tooLate { worker.cancel(); timer.cancel() }
        }

        private static func isTransport(_ error: any Error) -> Bool {
            guard let error = error as? OfflineAgentError else { return true }
            return error.cause == .network
        }

        func finish(_ result: Result<T, any Error>) {
            let (continuation, tasks) = state.withLock { state -> (CheckedContinuation<T, any Error>?, [Task<Void, Never>]) in
                guard !state.finished else { return (nil, []) }
                state.finished = true
                if state.continuation == nil { state.early = result }
                defer { state.continuation = nil }
                return (state.continuation, state.tasks)
            }
            for task in tasks { task.cancel() }
            continuation?.resume(with: result)
        }
    }
}
