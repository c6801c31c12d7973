import CoreMetrics
import OfflineHTTP

/// Counters of the reference server, recorded through swift-metrics into a
/// swift-prometheus registry this server owns (never `MetricsSystem`'s global backend),
/// and exposed at `GET /metrics` in the Prometheus text format (version 0.0.4). Thread-safe;
/// every count only grows.
///
/// - `offline_server_manifests_total{code}` — manifests answered by `/manifest` and
///   `/NAME/manifest`, by status: `200` (a body) or `304` (`If-None-Match` matched).
/// - `offline_server_file_responses_total{kind,code}` — responses to `GET|HEAD /NAME/FILE`
///   for a servable name, by kind (`full`, `patch`, `sig`, `manifest` for the static
///   `manifest.json`) and status (200, 206, 304, 404, 416).
/// - `offline_server_sent_bytes_total{kind}` — body bytes of manifests and files written to
///   clients, by kind (`manifest` counts both the answered and the static manifests); a
///   transfer the client cuts counts what was written.
/// - `offline_server_errors_total{code}` — every response with status 400 or above, any
///   route (bad app name or version, unknown app or file, `416`, `405`, `500`).
/// - `offline_server_faults_total{fault,scope}` — faults injected with `--fault` (see
///   `ServerFault`), by fault and the scope of the request (`other` for none of the four).
///
/// Both manifest series and the four byte series are shown from the start, at 0; other
/// series appear with their first count. Families and samples are sorted by name.
public final class ReferenceServerMetrics: Sendable {
    private enum Name {
        static let manifests = "offline_server_manifests_total"
        static let files = "offline_server_file_responses_total"
        static let bytes = "offline_server_sent_bytes_total"
        static let errors = "offline_server_errors_total"
    }

    let registry = ServerMetricsRegistry(help: [
        Name.manifests: "Manifests answered, by status (200 or 304).",
        Name.files: "Responses to GET and HEAD of published files, by kind and status code.",
        Name.bytes: "Body bytes of manifests and files written to clients, by kind.",
        Name.errors: "Responses with a status of 400 or above, by status code.",
        ReferenceServerMetrics.faultsName: "Faults injected (--fault), by fault and the request's scope.",
    ])
    // The series every manifest or payload touches, made once.
    private let manifests: [Int: CoreMetrics.Counter]
    private let bytes: [ReferenceServerFileKind: CoreMetrics.Counter]

    public init() {
        var manifests: [Int: CoreMetrics.Counter] = [:]
        for code in [200, 304] { manifests[code] = registry.counter(Name.manifests, [("code", String(code))]) }
        self.manifests = manifests
        var bytes: [ReferenceServerFileKind: CoreMetrics.Counter] = [:]
        for kind in ReferenceServerFileKind.allCases { bytes[kind] = registry.counter(Name.bytes, [("kind", kind.rawValue)]) }
        self.bytes = bytes
    }

    /// Counts one manifest answer (200 or 304).
    func recordManifest(code: Int) {
        (manifests[code] ?? registry.counter(Name.manifests, [("code", String(code))])).increment()
    }

    /// Counts one response to a published file.
    func recordFile(_ kind: ReferenceServerFileKind, code: Int) {
        registry.counter(Name.files, [("kind", kind.rawValue), ("code", String(code))]).increment()
    }

    /// Counts body bytes written for a manifest or file.
    func recordSent(_ kind: ReferenceServerFileKind, bytes count: Int) {
        guard count > 0 else { return }
        bytes[kind]?.increment(by: Int64(count))
    }

    /// Counts one response with status 400 or above.
    func recordError(code: Int) {
        registry.counter(Name.errors, [("code", String(code))]).increment()
    }

    /// Manifests answered with status `code` (200 or 304).
    public func manifests(code: Int) -> Int {
        count(Name.manifests, [("code", String(code))])
    }

    /// Responses to published files of `kind` with status `code`.
    public func fileResponses(_ kind: ReferenceServerFileKind, code: Int) -> Int {
        count(Name.files, [("kind", kind.rawValue), ("code", String(code))])
    }

    /// Body bytes of `kind` written to clients.
    public func sentBytes(_ kind: ReferenceServerFileKind) -> Int {
        count(Name.bytes, [("kind", kind.rawValue)])
    }

    /// Responses with status `code` (400 or above).
    public func errors(code: Int) -> Int {
        count(Name.errors, [("code", String(code))])
    }

    /// The Prometheus text exposition of every series, as served at `/metrics`.
    public func prometheusText() -> String {
        registry.exposition()
    }

    /// A series' value as exported (so the accessors and a scrape always agree).
    private func count(_ name: String, _ labels: [(String, String)]) -> Int {
        Int(registry.value(name, labels))
    }
}
