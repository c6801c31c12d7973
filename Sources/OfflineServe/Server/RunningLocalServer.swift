import FoundationEssentials
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import OfflineAgent
import OfflineHTTP
import ServiceLifecycle

/// A package server started with `LocalServer.start()`.
public final class RunningLocalServer: Sendable {
    /// The address the server listens on.
    public let host: String
    /// The server's counters.
    public let metrics: LocalServerMetrics
    private let service: BackgroundService
    private let resolver: Resolver

    init(host: String, metrics: LocalServerMetrics, service: BackgroundService, resolver: Resolver) {
        self.host = host
        self.metrics = metrics
        self.service = service
        self.resolver = resolver
    }

    /// The port it listens on (the one picked, when configured with 0).
    public var port: Int { service.port }

    /// `http://HOST:PORT`, without a trailing slash.
    public var baseURL: String { "http://\(WebAddress.authority(host: host, port: port))" }

    /// Where a web view loads `url` through this server: the URL on its origin's mirror
    /// host and this server's port (`http://h5.example.com.localhost:PORT/path?query#fragment`),
    /// or nil when no active whitelist names the URL's origin (load `url` itself).
    public func mirrorURL(for url: URL) -> String? {
        resolver.mirrorURL(for: url, servePort: port)
    }

    /// Shuts the server down gracefully and waits until it has stopped.
    public func stop() async {
        await service.stop()
    }
}
