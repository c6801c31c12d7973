import FoundationEssentials
import OfflineAgent
import Synchronization

/// Counters of the loopback package server, exposed at `GET /metrics` in the
/// Prometheus text format (version 0.0.4). Thread-safe; every count but the open-connection gauge only grows.
///
/// - `offline_agent_offline_hits_total{app}` — `/open` URLs served from a package
///   (redirected to the local copy).
/// - `offline_agent_network_fallbacks_total{app,reason}` — `/open` URLs sent to the
///   network, by reason (`not-whitelisted`, `below-mini-version`, `outside-rollout`,
///   `missing-file`); `app` is empty when no app's whitelist matched. Requests under
///   `/<app>/` that the kill switch sends to the network count here too.
/// - `offline_agent_file_responses_total{app,code}` — responses to `GET|HEAD /<app>/…`
///   by status (200, 206, 302, 304, 404, 416); `app` is empty for names with no active version.
/// - `offline_agent_forbidden_host_total` — requests refused for a non-loopback `Host`.
/// - `offline_agent_open_connections` — connections open now (a gauge).
/// - `offline_agent_refused_connections_total` — connections closed at once (503)
///   because `maxConnections` were open.
/// - `offline_agent_timed_out_connections_total{timeout}` — connections closed by the
///   `header` or `idle` timeout.
public final class LocalServerMetrics: Sendable {
    private struct FallbackKey: Hashable {
        var app: String
        var reason: FallbackReason
    }

    private struct FileKey: Hashable {
        var app: String
        var code: Int
    }

    private struct Counters {
        var hits: [String: Int] = [:]
        var fallbacks: [FallbackKey: Int] = [:]
        var files: [FileKey: Int] = [:]
        var forbidden = 0
        var refused = 0
        var open = 0
        var timeouts: [LocalConnectionTimeout: Int] = [:]
    }

    private let counters = Mutex(Counters())

    public init() {}

    /// Counts one `/open` resolution.
    public func recordOpen(_ resolution: Resolution) {
        counters.withLock { c in
            switch resolution {
            case .file(let file):
                c.hits[file.app, default: 0] += 1
            case .network(let reason, let app):
                c.fallbacks[FallbackKey(app: app ?? "", reason: reason), default: 0] += 1
            }
        }
    }

    /// Counts one request under `/<app>/` the kill switch sent to the network.
    func recordFallback(app: String, reason: FallbackReason) {
        counters.withLock { c in
            c.fallbacks[FallbackKey(app: app, reason: reason), default: 0] += 1
        }
    }

    /// Counts a connection given a slot, or (`opened` false) its slot given back.
    func recordConnection(opened: Bool) {
        counters.withLock { c in
            c.open += opened ? 1 : -1
        }
    }

    /// Counts one connection refused because `maxConnections` were open.
    func recordRefusedConnection() {
        counters.withLock { c in
            c.refused += 1
        }
    }

    /// Counts one connection closed by the header or idle timeout.
    func recordTimeout(_ kind: LocalConnectionTimeout) {
        counters.withLock { c in
            c.timeouts[kind, default: 0] += 1
        }
    }

    /// Counts one response under `/<app>/`.
    func recordFile(app: String, code: Int) {
        counters.withLock { c in
            c.files[FileKey(app: app, code: code), default: 0] += 1
        }
    }

    func recordForbiddenHost() {
        counters.withLock { c in
            c.forbidden += 1
        }
    }

    /// `/open` URLs of `app` served offline.
    public func offlineHits(app: String) -> Int {
        counters.withLock { c in
            return c.hits[app] ?? 0
        }
    }

    /// `/open` URLs sent to the network for `reason`; `app` nil or empty for "no app matched".
    public func networkFallbacks(app: String?, reason: FallbackReason) -> Int {
        counters.withLock { c in
            return c.fallbacks[FallbackKey(app: app ?? "", reason: reason)] ?? 0
        }
    }

    /// Responses under `/<app>/` with status `code`.
    public func fileResponses(app: String, code: Int) -> Int {
        counters.withLock { c in
            return c.files[FileKey(app: app, code: code)] ?? 0
        }
    }

    /// Requests refused with 403 for their `Host` header.
    public var forbiddenHosts: Int {
        counters.withLock { c in
            return c.forbidden
        }
    }

    /// Connections open now (each holding one of `maxConnections` slots).
    public var openConnections: Int {
        counters.withLock { c in
            return c.open
        }
    }

    /// Connections closed at once because `maxConnections` were already open.
    public var refusedConnections: Int {
        counters.withLock { c in
            return c.refused
        }
    }

    /// Connections closed by a timeout of `kind`.
    public func timedOutConnections(_ kind: LocalConnectionTimeout) -> Int {
        counters.withLock { c in
            return c.timeouts[kind] ?? 0
        }
    }

    /// The Prometheus text exposition of every counter, lines sorted for stable output.
    public func prometheusText() -> String {
        let (hits, fallbacks, files, forbidden, refused, timeouts, open) = counters.withLock { c in
            (c.hits, c.fallbacks, c.files, c.forbidden, c.refused, c.timeouts, c.open)
        }

        var out = ""
        out += "# HELP offline_agent_offline_hits_total URLs opened through /open and served from an offline package.\n"
        out += "# TYPE offline_agent_offline_hits_total counter\n"
        for (app, count) in hits.sorted(by: { $0.key < $1.key }) {
            out += "offline_agent_offline_hits_total{app=\"\(Self.escape(app))\"} \(count)\n"
        }
        out += "# HELP offline_agent_network_fallbacks_total URLs opened through /open and sent to the network, by reason.\n"
        out += "# TYPE offline_agent_network_fallbacks_total counter\n"
        for (key, count) in fallbacks.sorted(by: { ($0.key.app, $0.key.reason.rawValue) < ($1.key.app, $1.key.reason.rawValue) }) {
            out += "offline_agent_network_fallbacks_total{app=\"\(Self.escape(key.app))\",reason=\"\(key.reason.rawValue)\"} \(count)\n"
        }
        out += "# HELP offline_agent_file_responses_total Responses to GET and HEAD of package files, by status code.\n"
        out += "# TYPE offline_agent_file_responses_total counter\n"
        for (key, count) in files.sorted(by: { ($0.key.app, $0.key.code) < ($1.key.app, $1.key.code) }) {
            out += "offline_agent_file_responses_total{app=\"\(Self.escape(key.app))\",code=\"\(key.code)\"} \(count)\n"
        }
        out += "# HELP offline_agent_forbidden_host_total Requests refused because their Host header is not a loopback name.\n"
        out += "# TYPE offline_agent_forbidden_host_total counter\n"
        out += "offline_agent_forbidden_host_total \(forbidden)\n"
        out += "# HELP offline_agent_open_connections Connections open now.\n"
        out += "# TYPE offline_agent_open_connections gauge\n"
        out += "offline_agent_open_connections \(open)\n"
        out += "# HELP offline_agent_refused_connections_total Connections closed at once because the connection cap was reached.\n"
        out += "# TYPE offline_agent_refused_connections_total counter\n"
        out += "offline_agent_refused_connections_total \(refused)\n"
        out += "# HELP offline_agent_timed_out_connections_total Connections closed by the header or idle timeout.\n"
        out += "# TYPE offline_agent_timed_out_connections_total counter\n"
        for kind in LocalConnectionTimeout.allCases {
            out += "offline_agent_timed_out_connections_total{timeout=\"\(kind.rawValue)\"} \(timeouts[kind] ?? 0)\n"
        }
        return out
    }

    /// Label values: backslash, quote and newline escaped (app names never need it).
    private static func escape(_ value: String) -> String {
        value.replacing("\\", with: "\\\\").replacing("\"", with: "\\\"").replacing("\n", with: "\\n")
    }
}
