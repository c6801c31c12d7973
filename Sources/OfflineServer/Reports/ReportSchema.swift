/// The reports database's schema, one ordered list of steps for SQLite and PostgreSQL
/// alike, each in the dialect's words (`SQLDialect`). `ReportStore` hands the steps to
/// GRDB's migrator (recorded in `grdb_migrations`), `PostgresReportStore` to its runner
/// under an advisory lock (recorded in `offline_server_migrations`); either runs a step
/// once per database, by its name, so a database made by an older server keeps its
/// history and runs only the steps it lacks.
///
/// The one difference of history: PostgreSQL's store came after SQLite's `v2`, and its
/// `v1` created `v2`'s indexes too. Its databases hold `v1`, `v3`…`v7`, so on PostgreSQL
/// `v1` keeps those indexes and there is no `v2`. `v1` and `v2` say `IF NOT EXISTS`, as
/// PostgreSQL's `v1` always did (a database from before its record).
enum ReportSchema {
    /// The steps, in order: a name (recorded once run) and its statements.
    static func migrations(_ dialect: SQLDialect) -> [(name: String, statements: [String])] {
        let integer = dialect.integer, keyed = dialect.keyedTable, total = dialect.total
        // --auto-halt reads one app's recent events about one version; /stats' distinct
        // devices come from an index, not the table. (Wider covering indexes for the
        // per-version sums and the devices' update order were measured: they saved /stats
        // little and cost ingestion more than half; bench/fleet.py.)
        let v2 = [
            "CREATE INDEX IF NOT EXISTS events_app_received ON events(app, receivedMillis)",
            "CREATE INDEX IF NOT EXISTS events_app_device ON events(app, device)",
        ]
        let steps: [(name: String, statements: [String])] = [
            ("v1", [
                """
                CREATE TABLE IF NOT EXISTS events (
                    seq \(dialect.sequenceKey),
                    id TEXT NOT NULL,
                    time TEXT NOT NULL,
                    timeMillis \(integer) NOT NULL,
                    device TEXT NOT NULL,
                    app TEXT NOT NULL,
                    event TEXT NOT NULL,
                    version TEXT,
                    previousVersion TEXT,
                    via TEXT,
                    bytes \(integer) NOT NULL,
                    fullSize \(integer),
                    durationMs \(integer) NOT NULL,
                    errorCode TEXT,
                    message TEXT,
                    offlineHits \(integer),
                    periodSeconds \(integer),
                    receivedMillis \(integer) NOT NULL
                )
                """,
                "CREATE UNIQUE INDEX IF NOT EXISTS events_id ON events(id)",
                "CREATE INDEX IF NOT EXISTS events_app ON events(app, event)",
                """
                CREATE TABLE IF NOT EXISTS fallbacks (
                    eventSeq \(integer) NOT NULL REFERENCES events(seq),
                    reason TEXT NOT NULL,
                    count \(integer) NOT NULL
                )
                """,
                "CREATE INDEX IF NOT EXISTS fallbacks_event ON fallbacks(eventSeq)",
            ] + (dialect == .postgres ? v2 : [])),
            ("v2", v2),
            // The running sums (`ReportRollup`), filled from the events already stored.
            ("v3", [
                """
                CREATE TABLE version_totals (
                    app TEXT NOT NULL, version TEXT NOT NULL,
                    events \(integer) NOT NULL, updated \(integer) NOT NULL, failed \(integer) NOT NULL, rolledBack \(integer) NOT NULL,
                    bytes \(integer) NOT NULL, bytesSaved \(integer) NOT NULL, offlineHits \(integer) NOT NULL,
                    firstUpdated \(integer), lastUpdated \(integer),
                    PRIMARY KEY (app, version)
                )\(keyed)
                """,
                """
                CREATE TABLE failure_causes (
                    app TEXT NOT NULL, version TEXT NOT NULL, errorCode TEXT NOT NULL, count \(integer) NOT NULL,
                    PRIMARY KEY (app, version, errorCode)
                )\(keyed)
                """,
                """
                CREATE TABLE fallback_totals (
                    app TEXT NOT NULL, reason TEXT NOT NULL, count \(integer) NOT NULL,
                    PRIMARY KEY (app, reason)
                )\(keyed)
                """,
                """
                CREATE TABLE devices (
                    app TEXT NOT NULL, device TEXT NOT NULL, version TEXT, timeMillis \(integer), seq \(integer),
                    PRIMARY KEY (app, device)
                )\(keyed)
                """,
                "CREATE INDEX devices_version ON devices(app, version)",
                "CREATE TABLE version_moves (app TEXT NOT NULL, receivedMillis \(integer) NOT NULL, version TEXT NOT NULL, previous TEXT)",
                "CREATE INDEX version_moves_app ON version_moves(app, receivedMillis)",
                """
                INSERT INTO version_totals
                SELECT app, COALESCE(version, ''), COUNT(*), COUNT(CASE WHEN event = 'updated' THEN 1 END),
                    COUNT(CASE WHEN event = 'failed' THEN 1 END), COUNT(CASE WHEN event = 'rolled-back' THEN 1 END), \(total("bytes")),
                    \(total("CASE WHEN event = 'updated' AND via = 'patch' AND fullSize > bytes THEN fullSize - bytes ELSE 0 END")),
                    \(total("CASE WHEN event = 'usage' THEN COALESCE(offlineHits, 0) ELSE 0 END")),
                    MIN(CASE WHEN event = 'updated' THEN receivedMillis END), MAX(CASE WHEN event = 'updated' THEN receivedMillis END)
                FROM events GROUP BY app, COALESCE(version, '')
                """,
                """
                INSERT INTO failure_causes
                SELECT app, version, COALESCE(errorCode, ''), COUNT(*) FROM events
                WHERE event = 'failed' AND version IS NOT NULL GROUP BY app, version, COALESCE(errorCode, '')
                """,
                """
                INSERT INTO fallback_totals
                SELECT e.app, f.reason, \(total("f.count")) FROM fallbacks f JOIN events e ON e.seq = f.eventSeq GROUP BY e.app, f.reason
                """,
                """
                INSERT INTO devices
                SELECT app, device, version, timeMillis, seq FROM (
                    SELECT app, device, version, timeMillis, seq,
                        ROW_NUMBER() OVER (PARTITION BY app, device ORDER BY timeMillis DESC, seq DESC) AS rank
                    FROM events WHERE event = 'updated' AND version IS NOT NULL
                ) latest WHERE rank = 1
                """,
                "INSERT INTO devices (app, device) SELECT DISTINCT app, device FROM events WHERE true ON CONFLICT DO NOTHING",
                """
                INSERT INTO version_moves
                SELECT app, receivedMillis, version, previous FROM (
                    SELECT app, receivedMillis, version,
                        LAG(version) OVER (PARTITION BY app, device ORDER BY timeMillis, seq) AS previous
                    FROM events WHERE event = 'updated' AND version IS NOT NULL
                ) updates WHERE previous IS NULL OR previous != version
                """,
            ]),
            // Rollbacks against the version rolled back from, devices where their latest move put them.
            ("v4", ReportRollup.rollbacksRecount + ReportRollup.positionsRecount),
            // Whether a device's own credential sent the event (events stored before: no).
            ("v5", ["ALTER TABLE events \(dialect.addColumn) authenticated \(dialect.boolean.type) NOT NULL DEFAULT \(dialect.boolean.no)"]),
            // The /metrics counters' sums, so a start reads them instead of every event.
            ("v6", ReportCounters.migration(dialect)),
            // The adoption chart reads the moves of the versions it draws, not every move.
            ("v7", AdoptionSeries.movesIndexes),
            // Where devices are, by arrival instead of the devices' clocks (`ReportRollup.Latest`).
            ("v8", ReportRollup.positionsRecount),
            // Enrolment once per device id (`ReportSQL.enrol`): the ids that reported with their
            // own credential before are enrolled, under the secret the next start holds.
            ("v9", [
                """
                CREATE TABLE enrolled_devices (
                    device TEXT NOT NULL, secret TEXT NOT NULL, enrolledMillis \(integer) NOT NULL,
                    PRIMARY KEY (device)
                )\(keyed)
                """,
                """
                INSERT INTO enrolled_devices (device, secret, enrolledMillis)
                SELECT device, '', MIN(receivedMillis) FROM events WHERE authenticated GROUP BY device
                """,
            ]),
        ]
        return dialect == .postgres ? steps.filter { $0.name != "v2" } : steps
    }
}
