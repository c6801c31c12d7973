import Hummingbird
import Logging
import OfflineAgent
import ServiceLifecycle

/// How both servers run a Hummingbird application: in the foreground until a signal,
/// or in the background for tests, returning once the port is bound.
package enum ServiceRunner {
    package typealias OnListening = @Sendable (_ host: String, _ port: Int) async -> Void

    /// Runs until the task is cancelled or, with `stopOnSignals`, SIGTERM/SIGINT
    /// arrives; in-flight responses finish first (graceful shutdown).
    package static func run(_ service: some Service, stopOnSignals: Bool, logger: Logger) async throws {
        let group = ServiceGroup(configuration: .init(
            services: [service], gracefulShutdownSignals: stopOnSignals ? [.sigterm, .sigint] : [], logger: logger))
        try await group.run()
    }

    /// Starts the service made by `make` in the background and returns once it listens.
    package static func start(logger: Logger, _ make: (@escaping OnListening) -> some Service) async throws -> BackgroundService {
        let (bound, continuation) = AsyncStream<Int>.makeStream()
        let group = ServiceGroup(configuration: .init(
            services: [make { _, port in continuation.yield(port); continuation.finish() }], logger: logger))
        let task = Task {
            defer { continuation.finish() }
            try await group.run()
        }
        var ports = bound.makeAsyncIterator()
        guard let port = await ports.next() else {
            try await task.value
            throw OfflineAgentError(.usage, "server stopped before it was listening")
        }
        return BackgroundService(port: port, group: group, task: task)
    }
}
