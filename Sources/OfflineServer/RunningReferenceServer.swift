import Foundation
import Hummingbird
import Logging
import OfflineAgent
import OfflineHTTP
import ServiceLifecycle

/// A reference server started with `ReferenceServer.start()`.
public final class RunningReferenceServer: Sendable {
    public let host: String
    /// The server's counters, also served at `GET /metrics`.
    public let metrics: ReferenceServerMetrics
    private let service: BackgroundService
    /// Closes the reports store once the server stopped (a PostgreSQL client's connections).
    private let afterStop: @Sendable () async -> Void

    init(host: String, metrics: ReferenceServerMetrics, service: BackgroundService, afterStop: @escaping @Sendable () async -> Void = {}) {
        self.host = host
        self.metrics = metrics
        self.service = service
        self.afterStop = afterStop
    }

    public var port: Int { service.port }

    /// `http://HOST:PORT`, without a trailing slash.
    public var baseURL: String { "http://\(host):\(port)" }

    /// Shuts the server down gracefully and waits until it has stopped.
    public func stop() async {
        await service.stop()
        await afterStop()
    }
}
