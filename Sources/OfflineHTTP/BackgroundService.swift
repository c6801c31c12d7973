import Hummingbird
import Logging
import OfflineAgent
import ServiceLifecycle

/// A service group running in a task, stopped gracefully on request.
package struct BackgroundService: Sendable {
    package let port: Int
    package let group: ServiceGroup
    package let task: Task<Void, any Error>

    /// Shuts the service down gracefully and waits until it has stopped.
    package func stop() async {
        await group.triggerGracefulShutdown()
        _ = try? await task.value
    }
}
