import Foundation
import OfflineAgent

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
public final class LocalServerMetrics: @unchecked Sendable {
    private struct FallbackKey: Hashable {
        var app: String
        var reason: FallbackReason
    }

    private struct FileKey: Hashable {
        var app: String
        var code: Int
    }

    private let lock = NSLock()
    private var hits: [String: Int] = [:]
    private var fallbacks: [FallbackKey: Int] = [:]
    private var files: [FileKey: Int] = [:]
    private var forbidden = 0
    private var refused = 0
    private var open = 0
    private var timeouts: [LocalConnectionTimeout: Int] = [:]

    /// Counters at zero.
    public init() {}

    /// Counts one `/open` resolution.
    public func recordOpen(_ resolution: Resolution) {
        lock.lock()
        defer { lock.unlock() }
        switch resolution {
        case .file(let file):
            hits[file.app, default: 0] += 1
        case .network(let reason, let app):
            fallbacks[FallbackKey(app: app ?? "", reason: reason), default: 0] += 1
        }
    }

    /// Counts one request under `/<app>/` the kill switch sent to the network.
    func recordFallback(app: String, reason: FallbackReason) {
        lock.lock()
        fallbacks[FallbackKey(app: app, reason: reason), default: 0] += 1
        lock.unlock()
    }

    /// Counts a connection given a slot, or (`opened` false) its slot given back.
    func recordConnection(opened: Bool) {
        lock.lock()
        open += opened ? 1 : -1
        lock.unlock()
    }

    /// Counts one connection refused because `maxConnections` were open.
    func recordRefusedConnection() {
        lock.lock()
        refused += 1
        lock.unlock()
    }

    /// Counts one connection closed by the header or idle timeout.
    func recordTimeout(_ kind: LocalConnectionTimeout) {
        lock.lock()
        timeouts[kind, default: 0] += 1
        lock.unlock()
    }

    /// Counts one response under `/<app>/`.
    func recordFile(app: String, code: Int) {
        lock.lock()
        files[FileKey(app: app, code: code), default: 0] += 1
        lock.unlock()
    }

    func recordForbiddenHost() {
        lock.lock()
        forbidden += 1
        lock.unlock()
    }

    /// `/open` URLs of `app` served offline.
    public func offlineHits(app: String) -> Int {
        lock.lock()
        defer { lock.unlock() }
        return hits[app] ?? 0
    }

    /// `/open` URLs sent to the network for `reason`; `app` nil or empty for "no app matched".
    public func networkFallbacks(app: String?, reason: FallbackReason) -> Int {
        lock.lock()
        defer { lock.unlock() }
        return fallbacks[FallbackKey(app: app ?? "", reason: reason)] ?? 0
    }

    /// Responses under `/<app>/` with status `code`.
    public func fileResponses(app: String, code: Int) -> Int {
        lock.lock()
        defer { lock.unlock() }
        return files[FileKey(app: app, code: code)] ?? 0
    }

    /// Requests refused with 403 for their `Host` header.
    public var forbiddenHosts: Int {
        lock.lock()
        defer { lock.unlock() }
        return forbidden
    }

    /// Connections open now (each holding one of `maxConnections` slots).
    public var openConnections: Int {
        lock.lock()
        defer { lock.unlock() }
        return open
    }

    /// Connections closed at once because `maxConnections` were already open.
    public var refusedConnections: Int {
        lock.lock()
        defer { lock.unlock() }
        return refused
    }

    /// Connections closed by a timeout of `kind`.
    public func timedOutConnections(_ kind: LocalConnectionTimeout) -> Int {
        lock.lock()
        defer { lock.unlock() }
        return timeouts[kind] ?? 0
    }

    /// The Prometheus text exposition of every counter, lines sorted for stable output.
    public func prometheusText() -> String {
        lock.lock()
        let hits = self.hits, fallbacks = self.fallbacks, files = self.files, forbidden = self.forbidden
        let refused = self.refused, timeouts = self.timeouts, open = self.open
        lock.unlock()

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
        value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
            .replacingOccurrences(of: "\n", with: "\\n")
    }
}
