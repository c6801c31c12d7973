/// Where `offline-server` keeps fleet report events: SQLite (`ReportStore`, the
/// embedded default) or PostgreSQL (`PostgresReportStore`, shared by several
/// instances). Both run one schema (`ReportSchema`) and one set of statements
/// (`ReportSQL`), each in its dialect's words (`SQLDialect`), so `/stats`, the dashboard
/// and `--auto-halt` read the same figures from either.
protocol ReportStorage: Sendable {
    /// Where the store is, for the log (a path or a URL without its password).
    var location: String { get }
    /// Stores `writes` in one transaction, in order: all of them or none. An id already
    /// stored, or earlier in `writes`, is a duplicate. One insertion per write, in order.
    func insert(_ writes: [ReportWrite]) async throws -> [ReportInsertion]
    /// The counters of every stored event (restored into `/metrics` at start), from their
    /// stored sums (`ReportCounters`), so a start does not read every event.
    func tally(labels: ReportLabels) async throws -> ReportTally
    /// `/stats?app=NAME`, from every stored event of `app`, its versions bounded
    /// (`AppStats.bound(keeping:)`, `latest` kept) before their failure causes are read.
    func stats(app: String, keeping latest: String?) async throws -> AppStats
    /// Per device, what it reported about `version` of `app` in events received at
    /// `sinceMillis` or later: `updated` or `failed` naming it, `rolled-back` or `marked-bad` from it;
    /// with `authenticatedOnly`, only events stored as `authenticated`.
    func rolloutDevices(app: String, version: String, sinceMillis: Int64, authenticatedOnly: Bool) async throws -> [RolloutFigures.Device]
    /// Devices that sent any event about `app` (`--auto-halt` scales `min-devices` by it).
    func knownDevices(app: String) async throws -> Int64
    /// The dashboard's adoption chart of `app` (see `AdoptionSeries`), from the moves into
    /// and out of `versions` only (the versions its table lists, a bounded number): the
    /// read costs what the chart shows, not the history of every version reported.
    func adoption(app: String, versions: [String]) async throws -> AdoptionSeries
    /// Enrols `device` under the secret of `fingerprint` (`ReportSQL.enrol`): true when
    /// it enrolled now, false when it was enrolled under that secret already (refused).
    func enrol(device: String, fingerprint: String, nowMillis: Int64) async throws -> Bool
    /// Gives the ids enrolled by migration `v9` the fingerprint of the secret in use.
    func adoptEnrolments(fingerprint: String) async throws
    /// Lets `device` enrol again; whether it was enrolled.
    func releaseEnrolment(device: String) async throws -> Bool
    /// Releases connections.
    func close() async
}

/// What one batch did to the store.
struct ReportInsertion: Sendable {
    /// The events stored now, in batch order (their counts go to the metrics).
    var inserted: [ReportEvent]
    /// Events whose id was already stored (before or earlier in this batch).
    var duplicates: Int
}
