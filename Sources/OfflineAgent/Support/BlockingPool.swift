import NIOPosix
import Synchronization

/// The threads an agent runs its blocking work on (patching, extraction, hashing,
/// fsync, tree removal), so none of it occupies a thread of Swift's cooperative pool:
/// that pool has one thread per core, and a host app's async code would stall behind
/// a minute-long extraction.
///
/// One `NIOThreadPool`, started by the first piece of work (an agent that only
/// resolves never starts a thread) and stopped by `shutdown`. Each piece of work is a
/// synchronous closure that never waits for another one, so a small pool cannot deadlock.
package final class BlockingPool: Sendable {
    private enum State {
        case idle
        case running(NIOThreadPool)
        case shutDown
    }

    /// Two threads: installs of a batch overlap, yet an update never takes every core.
    package static let defaultThreads = 2

    private let threads: Int
    private let state = Mutex(State.idle)

    package init(threads: Int = BlockingPool.defaultThreads) {
        self.threads = max(1, threads)
    }

    /// An owner that goes away without `shutdown` (an `Agent` a host app drops) does not
    /// leave its threads behind: they stop once the work on them ends.
    deinit { shutdownInBackground() }

    /// True once `shutdown` was called.
    package var isShutDown: Bool {
        state.withLock { state in
            if case .shutDown = state { return true }
            return false
        }
    }

    /// Runs `body` on the pool and returns its result.
    ///
    /// - Parameters:
    ///   - phase: the phase reported when the work never ran.
    ///   - cancellable: false for work that must follow what is already done (the
    ///     bookkeeping of an installed version): it runs even if the task is cancelled.
    /// - Throws: what `body` throws; `OfflineAgentError(phase, cause: .cancelled)` when
    ///   the task was cancelled before the work started (work that started always
    ///   finishes: a half-done extraction is not left behind) or the pool is shut down.
    package func run<T: Sendable>(
        _ phase: OfflineAgentError.Code, cancellable: Bool = true, _ body: @escaping @Sendable () throws -> T
    ) async throws -> T {
        guard let pool = started() else { throw Self.stopped(phase) }
        do {
            if cancellable { return try await pool.runIfActive(body) }
            // An unstructured task does not inherit the caller's cancellation.
            return try await Task { try await pool.runIfActive(body) }.value
        } catch is CancellationError {
            throw OfflineAgentError(phase, "cancelled", cause: .cancelled)
        } catch is NIOThreadPoolError.ThreadPoolInactive {
            throw Self.stopped(phase)
        }
    }

    /// Stops the threads once the work running on them ends; work queued behind it and
    /// every later `run` fail with `.cancelled`.
    package func shutdown() async {
        guard let pool = stop() else { return }
        try? await pool.shutdownGracefully()
    }

    /// `shutdown` without waiting, for a `deinit`.
    package func shutdownInBackground() {
        stop()?.shutdownGracefully { _ in }
    }

    private func started() -> NIOThreadPool? {
        state.withLock { state in
            switch state {
            case .running(let pool):
                return pool
            case .idle:
                let pool = NIOThreadPool(numberOfThreads: threads)
                pool.start()
                state = .running(pool)
                return pool
            case .shutDown:
                return nil
            }
        }
    }

    private func stop() -> NIOThreadPool? {
        state.withLock { state in
            defer { state = .shutDown }
            if case .running(let pool) = state { return pool }
            return nil
        }
    }

    private static func stopped(_ phase: OfflineAgentError.Code) -> OfflineAgentError {
        OfflineAgentError(phase, "the agent is shut down", cause: .cancelled)
    }
}
