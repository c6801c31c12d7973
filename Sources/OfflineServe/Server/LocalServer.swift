import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import OfflineAgent
import OfflineHTTP
import ServiceLifecycle

/// The loopback web server that puts offline packages in front of a web view
/// (`offline-agent serve`), over the same `Resolver` as the library.
///
/// - `GET|HEAD /<app>/<path>` — a file of the app's active version: Content-Type by
///   extension, `ETag` / `Last-Modified` with 304 (`If-None-Match`, else
///   `If-Modified-Since`), `Range` → 206 / 416 (with `If-Range`), `index.html` for
///   `/<app>/` and `/<app>/dir/`, a 301 to add the slash for `/<app>` and `/<app>/dir`,
///   404 for anything else; `..`, NUL, backslashes and symlinks never leave the
///   version directory (404; 400 for invalid percent-encoding). `X-Offline-Version`
///   names the version a response came from; `Cache-Control: no-cache` makes the
///   browser revalidate, so the load after a swap sees the new version.
/// - `GET /open?url=<percent-encoded URL>` — 302 to `/<app>/<rest>` (the URL's query
///   and fragment kept) when `docs/PROTOCOL.md`'s whitelist rules serve the URL offline,
///   otherwise 302 to the URL itself. Apps named `open` or `metrics` are still served
///   under `/open/…` and `/metrics/…`.
/// - `GET /session/restore?history=<percent-encoded JSON>` — a page that rebuilds a web
///   view's back/forward list (`SessionHistory`: `{"history": [URL, …], "currentPage": -1}`)
///   with `history.replaceState` / `pushState` on `/session/item` URLs, then loads the
///   current entry; 400 with the reason for an invalid history. `no-store`, a
///   Content-Security-Policy allowing only its own script (by hash), no referrer.
/// - `GET /session/item?url=<percent-encoded URL>` — one restored entry: the same 302 as
///   `/open` (and counted with it in the metrics); 400 for anything but an absolute http
///   or https URL. An app named `session` is still served under `/session/…` for
///   every other path.
/// - `GET /metrics` — Prometheus text (see `LocalServerMetrics`).
/// - `POST /.offline-agent/mark-good?app=NAME`, `POST /.offline-agent/mark-bad?app=NAME[&reason=TEXT]`
///   — the page confirms or reports its version (`Lifecycle`), JSON answer; each `/open`
///   and `/session/restore` of a version on trial counts one launch and may roll it back
///   first (see `LocalLifecycle`).
///
/// Mirrored origins (`docs/PROTOCOL.md`, "Mirrored origins"): every origin an active
/// whitelist names is also answered on its own loopback host (`MirrorOrigin`, e.g.
/// `h5.example.com.localhost`) with the origin's paths: whitelisted files from the
/// package (`X-Offline-Source: package`), navigations to single-page routes with the
/// manifest's `fallback` page, and everything else forwarded to the origin
/// (`OriginProxy`; `X-Offline-Source: origin`), the kill switch included; a WebSocket
/// upgrade there is relayed to the origin's WebSocket (`WebSocketRelay`). `/open` and
/// `/session/item` redirect URLs on a mirrored origin to their mirror URL. Any other
/// name under `.localhost` gets 403.
///
/// Requests whose `Host` header is not a loopback name (`localhost`, `127.x.x.x`,
/// `[::1]`, any port) get 403 unless `allowRemote` is set (DNS-rebinding defence);
/// a request with two `Host` lines gets 400 either way. `CONNECT` gets 405.
///
/// The kill switch holds on every route: an app whose active version is below the
/// known miniVersion or outside rollout for this device (`Resolver.fallbackReason`)
/// has no response made from its files; `/<app>/…` answers 302 to the network URL it
/// stands for, with `X-Offline-Fallback: <reason>`, as `/open` redirects to the network.
///
/// Every request takes one path: NIO's HTTP/1 decoder, one decision (`LocalRouter`), one
/// responder (`LocalServerResponder`), one origin client (`OriginProxy`). A request the
/// decoder refuses gets `400` (`431` for a head too large) and the connection closes at
/// once, as it does after any answer to an HTTP/1.0 request without keep-alive or a
/// request with `Connection: close` (`LocalRequestFraming`).
///
/// Hostile clients: at most `maxConnections` connections (at the cap, the connection idle
/// longest without a request is closed to admit a new one; with none idle, the new one
/// gets 503 and is closed at once), a request head within `headerTimeout`, and no
/// connection idle for longer than `idleTimeout` (see `Configuration`).
///
/// Each file response pins the version it reads (a shared lock on its record, see
/// `LocalVersions`) and takes every byte from one source: a descriptor opened once and
/// kept, with the pin, until the body is written (files over 2 MiB, streamed in 64 KiB
/// chunks), or the kept bytes of a file read under that same version record
/// (`LocalFileCache`, at most 64 MiB). An install or a garbage collection during the
/// response never mixes versions or cuts a file short, and the next request after a
/// swap sees the new version (`current` is read on every request).
public struct LocalServer: Sendable {
    /// Where to listen and what to serve.
    public struct Configuration: Sendable {
        /// The agent's root directory.
        public var root: String
        /// Address to bind: a loopback address unless `allowRemote`.
        public var host: String
        /// Port to bind; 0 picks a free one (see `start()` / `run(onListening:)`).
        public var port: Int
        /// The device id for the rollout bucket; the root's stable id when nil.
        public var deviceID: String?
        /// Allows a non-loopback bind and turns the `Host` header check off.
        public var allowRemote: Bool
        /// Launches a trial version may have unconfirmed before `/open` rolls it back;
        /// nil uses the limit the installing sync recorded (`AgentConfiguration.maxTrialLaunches`).
        public var maxTrialLaunches: Int?
        /// At most this many connections at once (256 by default, lowered to
        /// (soft `RLIMIT_NOFILE` − 64) / 2 when that is smaller). At the cap, the one idle
        /// longest without a request is closed for a new one; with none idle, the new one
        /// gets a 503 and is closed at once.
        public var maxConnections: Int
        /// A new connection, or one whose next request has begun, must send a complete
        /// request head within this time (10 s by default), or it is closed.
        public var headerTimeout: Duration
        /// A connection on which nothing is read or written for this long after a
        /// response has started, or nothing read while a request body is read, is
        /// closed (60 s by default): an idle keep-alive connection, a client that
        /// stopped reading its response, or one that stopped sending its body.
        public var idleTimeout: Duration
        /// Timeouts of forwarded requests (the defaults of `OriginProxy.Configuration`).
        package var origins = OriginProxy.Configuration()
        /// Bounds of relayed WebSockets (the defaults of `WebSocketRelay.Limits`).
        package var webSockets = WebSocketRelay.Limits()
        /// A configuration; the defaults listen on 127.0.0.1:8421.
        public init(
            root: String, host: String = "127.0.0.1", port: Int = 8421, deviceID: String? = nil, allowRemote: Bool = false,
            maxTrialLaunches: Int? = nil, maxConnections: Int = 256, headerTimeout: Duration = .seconds(10),
            idleTimeout: Duration = .seconds(60)
        ) {
            self.root = root
            self.host = host
            self.port = port
            self.deviceID = deviceID
            self.allowRemote = allowRemote
            self.maxTrialLaunches = maxTrialLaunches
            self.maxConnections = maxConnections
            self.headerTimeout = headerTimeout
            self.idleTimeout = idleTimeout
        }
    }

    /// Where the server listens and what it serves.
    public let configuration: Configuration
    /// The server's counters, also served at `/metrics`.
    public let metrics: LocalServerMetrics
    /// Receives Hummingbird's messages and, at `debug`, one line per request.
    public let logger: Logger
    private let resolver: Resolver

    /// Notices and worse (Hummingbird's "server started" line is `info`).
    public static var defaultLogger: Logger {
        var logger = Logger(label: "offline-agent.serve")
        logger.logLevel = .notice
        return logger
    }

    /// Checks the configuration and reads (or creates) the root's device id.
    ///
    /// - Throws: `OfflineAgentError(.usage)` for a non-loopback host without
    ///   `allowRemote`, a port outside 0…65535, a connection cap below 1 or a timeout
    ///   that is not positive.
    public init(configuration: Configuration, logger: Logger = LocalServer.defaultLogger) throws {
        guard (0...65535).contains(configuration.port) else {
            throw OfflineAgentError(.usage, "port \(configuration.port) is outside 0...65535")
        }
        guard configuration.maxConnections >= 1 else {
            throw OfflineAgentError(.usage, "the connection cap must be at least 1 (got \(configuration.maxConnections))")
        }
        guard configuration.headerTimeout > .zero, configuration.idleTimeout > .zero else {
            throw OfflineAgentError(.usage, "the header and idle timeouts must be positive")
        }
        guard configuration.allowRemote || LocalHost.isLoopback(host: configuration.host) else {
            throw OfflineAgentError(
                .usage, "refusing to listen on non-loopback address '\(configuration.host)' (use --allow-remote to allow it)")
        }
        let store = Store(root: configuration.root)
        let deviceID = try configuration.deviceID ?? DeviceID.load(root: store.root)
        self.configuration = configuration
        self.logger = logger
        self.metrics = LocalServerMetrics()
        self.resolver = Resolver(store: store, deviceID: deviceID)
    }

    /// Runs until the task is cancelled or, with `stopOnSignals`, SIGTERM/SIGINT
    /// arrives; in-flight responses finish first (graceful shutdown).
    ///
    /// - Parameters:
    ///   - stopOnSignals: also stop gracefully on SIGTERM or SIGINT (for a process that is only the server).
    ///   - onListening: called once with the bound host and port.
    public func run(
        stopOnSignals: Bool = false,
        onListening: @escaping @Sendable (_ host: String, _ port: Int) async -> Void = { _, _ in }
    ) async throws {
        do {
            try await ServiceRunner.run(makeApplication(onListening: onListening), stopOnSignals: stopOnSignals, logger: logger)
        } catch {
            throw listenFailure(error)
        }
    }

    /// Starts the server in the background and returns once it listens: the
    /// in-process form for tests (use port 0 and read `port`).
    ///
    /// - Throws: `OfflineAgentError(.serve, cause: .listenFailed)` when the address
    ///   cannot be bound (in use, not on this machine, not permitted).
    public func start() async throws -> RunningLocalServer {
        do {
            let service = try await ServiceRunner.start(logger: logger) { makeApplication(onListening: $0) }
            return RunningLocalServer(host: configuration.host, metrics: metrics, service: service, resolver: resolver)
        } catch {
            throw listenFailure(error)
        }
    }

    /// The one error for a server that could not listen: "cannot serve on HOST:PORT: why".
    private func listenFailure(_ error: any Error) -> any Error {
        if error is OfflineAgentError || error is CancellationError { return error }
        let address = WebAddress.authority(host: configuration.host, port: configuration.port)
        let why: String
        if let failure = error as? IOError {
            switch failure.errnoCode {
            case EADDRINUSE: why = "address in use"
            case EADDRNOTAVAIL: why = "address not available on this machine"
            case EACCES, EPERM: why = "permission denied"
            default: why = String(cString: strerror(failure.errnoCode))
            }
        } else if error is SocketAddressError {
            why = "cannot resolve the address"
        } else {
            why = "\(error)"
        }
        return OfflineAgentError(.serve, "cannot serve on \(address): \(why)", cause: .listenFailed)
    }

    private func makeApplication(onListening: @escaping @Sendable (String, Int) async -> Void) -> some Service {
        let host = configuration.host
        let mirrors = LocalMirrors(store: resolver.store)
        let router = LocalRouter(
            versions: LocalVersions(resolver: resolver), files: LocalFileCache(),
            lifecycle: LocalLifecycle(store: resolver.store, maxTrialLaunches: configuration.maxTrialLaunches),
            mirrors: mirrors, checkHost: !configuration.allowRemote)
        let responder = LocalServerResponder(
            router: router, resolver: resolver, metrics: metrics, logger: logger,
            proxy: OriginProxy(configuration: configuration.origins, metrics: metrics))
        let webSockets = MirrorWebSocketUpgrade(metrics: metrics, limits: configuration.webSockets)
        let limiter = LocalConnectionLimiter(limit: LocalConnectionLimiter.effectiveLimit(configuration.maxConnections))
        let headerTimeout = TimeAmount(configuration.headerTimeout), idleTimeout = TimeAmount(configuration.idleTimeout)
        let metrics = self.metrics
        let server = HTTPServerBuilder { respond in
            LocalServerChannel(
                http1: HTTP1Channel(responder: respond), limiter: limiter, headerTimeout: headerTimeout, idleTimeout: idleTimeout,
                metrics: metrics, router: router, webSockets: webSockets)
        }
        return Application(
            responder: responder,
            server: server,
            configuration: .init(address: .hostname(host, port: configuration.port)),
            onServerRunning: { channel in await onListening(host, channel.localAddress?.port ?? 0) },
            logger: logger)
    }
}
