import CoreMetrics
import OfflineAgent
import OfflineHTTP

/// Counters of the loopback package server, recorded through swift-metrics into a
/// swift-prometheus registry this server owns (never `MetricsSystem`'s global backend, which
/// a host app may have bootstrapped for itself), and exposed at `GET /metrics` in the
/// Prometheus text format (version 0.0.4). Thread-safe; every count but the
/// open-connection gauge only grows.
///
/// - `offline_agent_offline_hits_total{app}` — `/open` URLs served from a package
///   (redirected to the local copy), and requests on a mirror host the package answered
///   (a file, the entry page of a single-page route, a directory's redirect).
/// - `offline_agent_network_fallbacks_total{app,reason}` — `/open` URLs sent to the
///   network, by reason (`not-whitelisted`, `below-mini-version`, `outside-rollout`,
///   `missing-file`, `bad-version`); `app` is empty when no app's whitelist matched.
///   Requests under `/<app>/` that the kill switch sends to the network count here too,
///   as do GET and HEAD requests on a mirror host for a whitelisted path that go to the
///   origin: the kill switch's reason, `bad-version`, or `missing-file` when the package
///   has no such file. Other forwarded requests (API calls, other methods, paths no
///   whitelist selects) are the origin's traffic, not fallbacks, and are not counted here.
/// - `offline_agent_file_responses_total{app,code}` — responses to `GET|HEAD /<app>/…`
///   by status (200, 206, 302, 304, 400, 404, 416); `app` is empty for names with no active version.
/// - `offline_agent_forbidden_host_total` — requests refused for a non-loopback `Host`.
/// - `offline_agent_open_connections` — connections open now (a gauge; printed as a
///   floating-point number, `2.0`, as swift-prometheus writes gauges).
/// - `offline_agent_refused_connections_total` — connections closed at once (503)
///   because `maxConnections` were open and none was idle.
/// - `offline_agent_evicted_connections_total` — idle connections closed to admit a new
///   one at the cap.
/// - `offline_agent_timed_out_connections_total{timeout}` — connections closed by the
///   `header` or `idle` timeout.
///
/// - `offline_agent_forwarded_requests_total{origin,status}` — requests on a mirrored
///   origin forwarded to it and answered, by the origin's status class (`2xx` … `5xx`;
///   `1xx` for a relayed WebSocket's `101`).
/// - `offline_agent_origin_failures_total{origin,reason}` — forwarded requests the origin
///   failed: `unreachable` (answered 502), `timeout` (502), `refused` (a WebSocket
///   upgrade it declined, 502) or `broken` (the response was cut off after it began).
///
/// Series without labels and both timeout series are shown from the start, at 0; a
/// labelled series appears with its first count. Families and samples are sorted by name.
public final class LocalServerMetrics: Sendable {
    private enum Name {
        static let hits = "offline_agent_offline_hits_total"
        static let fallbacks = "offline_agent_network_fallbacks_total"
        static let files = "offline_agent_file_responses_total"
        static let forbidden = "offline_agent_forbidden_host_total"
        static let open = "offline_agent_open_connections"
        static let refused = "offline_agent_refused_connections_total"
        static let evicted = "offline_agent_evicted_connections_total"
        static let timeouts = "offline_agent_timed_out_connections_total"
        static let forwarded = "offline_agent_forwarded_requests_total"
        static let originFailures = "offline_agent_origin_failures_total"
    }

    private let registry = ServerMetricsRegistry(help: [
        Name.hits: "URLs opened through /open, and mirror-host requests, served from an offline package.",
        Name.fallbacks: "URLs opened through /open, and whitelisted mirror-host requests, sent to the network, by reason.",
        Name.files: "Responses to GET and HEAD of package files, by status code.",
        Name.forbidden: "Requests refused because their Host header is not a loopback name.",
        Name.open: "Connections open now.",
        Name.refused: "Connections closed at once because the connection cap was reached and none was idle.",
        Name.evicted: "Idle connections closed to admit a new one at the connection cap.",
        Name.timeouts: "Connections closed by the header or idle timeout.",
        Name.forwarded: "Requests on a mirrored origin forwarded to it, by the origin's status class.",
        Name.originFailures: "Forwarded requests the origin failed, by reason.",
    ])
    // The series every request may touch, made once.
    private let forbidden: CoreMetrics.Counter
    private let refused: CoreMetrics.Counter
    private let evicted: CoreMetrics.Counter
    private let open: Meter
    private let timeouts: [LocalConnectionTimeout: CoreMetrics.Counter]

    /// Metrics registered with the process's `MetricsSystem`.
    public init() {
        forbidden = registry.counter(Name.forbidden)
        refused = registry.counter(Name.refused)
        evicted = registry.counter(Name.evicted)
        open = registry.meter(Name.open)
        var timeouts: [LocalConnectionTimeout: CoreMetrics.Counter] = [:]
        for kind in LocalConnectionTimeout.allCases {
            timeouts[kind] = registry.counter(Name.timeouts, [("timeout", kind.rawValue)])
        }
        self.timeouts = timeouts
    }

    /// Counts one `/open` resolution.
    public func recordOpen(_ resolution: Resolution) {
        switch resolution {
        case .file(let file):
            hit(app: file.app)
        case .network(let reason, let app):
            recordFallback(app: app ?? "", reason: reason)
        }
    }

    /// Counts one request on a mirror host that `app`'s package answered.
    func recordMirrorHit(app: String) {
        hit(app: app)
    }

    private func hit(app: String) {
        registry.counter(Name.hits, [("app", app)]).increment()
    }

    /// Counts one request of `app` sent to the network for `reason`: under `/<app>/` by the
    /// kill switch, or on a mirror host for a whitelisted path.
    func recordFallback(app: String, reason: FallbackReason) {
        registry.counter(Name.fallbacks, [("app", app), ("reason", reason.rawValue)]).increment()
    }

    /// Counts a connection given a slot, or (`opened` false) its slot given back.
    func recordConnection(opened: Bool) {
        if opened { open.increment() } else { open.decrement() }
    }

    /// Counts one connection refused because `maxConnections` were open.
    func recordRefusedConnection() {
        refused.increment()
    }

    /// Counts one idle connection closed to admit a new one at the cap.
    func recordEvictedConnection() {
        evicted.increment()
    }

    /// Idle connections closed to admit a new one at the cap.
    public var evictedConnections: Int { count(Name.evicted) }

    /// Counts one connection closed by the header or idle timeout.
    func recordTimeout(_ kind: LocalConnectionTimeout) {
        timeouts[kind]?.increment()
    }

    /// Counts one response under `/<app>/`.
    func recordFile(app: String, code: Int) {
        fileCounter(app: app, code: code).increment()
    }

    private func fileCounter(app: String, code: Int) -> CoreMetrics.Counter {
        registry.counter(Name.files, [("app", app), ("code", String(code))])
    }

    /// Counts one forwarded request the origin answered with `status`.
    func recordForwarded(origin: String, status: Int) {
        registry.counter(Name.forwarded, [("origin", origin), ("status", "\(status / 100)xx")]).increment()
    }

    /// Counts one forwarded request the origin failed (`unreachable`, `timeout`, `broken`).
    func recordOriginFailure(origin: String, reason: String) {
        registry.counter(Name.originFailures, [("origin", origin), ("reason", reason)]).increment()
    }

    /// Forwarded requests to `origin` (`scheme://host[:port]`) answered with a status of `statusClass` (2 for 2xx).
    public func forwardedRequests(origin: String, statusClass: Int) -> Int {
        count(Name.forwarded, [("origin", origin), ("status", "\(statusClass)xx")])
    }

    /// Forwarded requests to `origin` that failed for `reason` (`unreachable`, `timeout`, `broken`).
    public func originFailures(origin: String, reason: String) -> Int {
        count(Name.originFailures, [("origin", origin), ("reason", reason)])
    }

    func recordForbiddenHost() {
        forbidden.increment()
    }

    /// `/open` URLs and mirror-host requests of `app` served offline.
    public func offlineHits(app: String) -> Int {
        count(Name.hits, [("app", app)])
    }

    /// `/open` URLs (and whitelisted mirror-host requests) sent to the network for `reason`;
    /// `app` nil or empty for "no app matched".
    public func networkFallbacks(app: String?, reason: FallbackReason) -> Int {
        count(Name.fallbacks, [("app", app ?? ""), ("reason", reason.rawValue)])
    }

    /// Responses under `/<app>/` with status `code`.
    public func fileResponses(app: String, code: Int) -> Int {
        count(Name.files, [("app", app), ("code", String(code))])
    }

    /// Requests refused with 403 for their `Host` header.
    public var forbiddenHosts: Int { count(Name.forbidden) }

    /// Connections open now (each holding one of `maxConnections` slots).
    public var openConnections: Int { count(Name.open) }

    /// Connections closed at once because `maxConnections` were already open.
    public var refusedConnections: Int { count(Name.refused) }

    /// Connections closed by a timeout of `kind`.
    public func timedOutConnections(_ kind: LocalConnectionTimeout) -> Int {
        count(Name.timeouts, [("timeout", kind.rawValue)])
    }

    /// The Prometheus text exposition of every series, as served at `/metrics`.
    public func prometheusText() -> String {
        registry.exposition()
    }

    /// A series' value as exported (so the accessors and a scrape always agree).
    private func count(_ name: String, _ labels: [(String, String)] = []) -> Int {
        Int(registry.value(name, labels))
    }
}
