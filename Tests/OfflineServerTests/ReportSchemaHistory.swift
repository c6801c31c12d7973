/// The reports database's schema as the servers before `ReportSchema` made it, step by
/// step, copied from their sources (commit f8a79f2): SQLite's GRDB migrations `v1`…`v7`
/// and PostgreSQL's own runner's `v1`, `v3`…`v7` (its `v1` held SQLite's `v2`). Written
/// out here, not taken from today's code, so a test holds today's store to the databases
/// those servers left, not to itself.
enum ReportSchemaHistory {
    static let max = "9223372036854775807"

    /// Events that move a device, as the `v4` of both wrote it.
    private static let moves = "((event = 'updated' AND version IS NOT NULL) OR event IN ('rolled-back', 'marked-bad'))"

    /// `v4`, the same text in both.
    private static let v4 = """
        UPDATE version_totals SET rolledBack = 0;
        INSERT INTO version_totals (app, version, events, updated, failed, rolledBack, bytes, bytesSaved, offlineHits)
        SELECT app, COALESCE(previousVersion, ''), 0, 0, 0, COUNT(*), 0, 0, 0 FROM events
        WHERE event IN ('rolled-back', 'marked-bad') GROUP BY app, COALESCE(previousVersion, '')
        ON CONFLICT (app, version) DO UPDATE SET rolledBack = excluded.rolledBack;
        DELETE FROM devices;
        DELETE FROM version_moves;
        INSERT INTO devices (app, device, version, timeMillis, seq)
        SELECT app, device, version, timeMillis, seq FROM (
            SELECT app, device, COALESCE(version, '') AS version, timeMillis, seq,
                ROW_NUMBER() OVER (PARTITION BY app, device ORDER BY timeMillis DESC, seq DESC) AS rank
            FROM events WHERE \(moves)
        ) latest WHERE rank = 1;
        INSERT INTO devices (app, device) SELECT DISTINCT app, device FROM events WHERE true ON CONFLICT DO NOTHING;
        INSERT INTO version_moves (app, receivedMillis, version, previous)
        SELECT app, receivedMillis, version, previous FROM (
            SELECT app, receivedMillis, COALESCE(version, '') AS version,
                LAG(COALESCE(version, '')) OVER (PARTITION BY app, device ORDER BY timeMillis, seq) AS previous
            FROM events WHERE \(moves)
        ) moved WHERE previous IS NULL OR previous != version;
        """

    /// `v6`, in a dialect's integer type and group sum.
    private static func v6(type: String, total: (String) -> String) -> String {
        """
        CREATE TABLE report_counters (
            app TEXT NOT NULL, event TEXT NOT NULL, version TEXT NOT NULL, via TEXT NOT NULL, errorCode TEXT NOT NULL,
            events \(type) NOT NULL, bytes \(type) NOT NULL, bytesSaved \(type) NOT NULL, offlineHits \(type) NOT NULL,
            PRIMARY KEY (app, event, version, via, errorCode)
        );
        INSERT INTO report_counters (app, event, version, via, errorCode, events, bytes, bytesSaved, offlineHits)
        SELECT app, event,
            CASE WHEN event = 'updated' THEN COALESCE(version, '') ELSE '' END,
            CASE WHEN event = 'updated' THEN COALESCE(via, '') ELSE '' END,
            CASE WHEN event = 'failed' THEN COALESCE(errorCode, '') ELSE '' END,
            COUNT(*), \(total("CASE WHEN bytes > 0 THEN bytes ELSE 0 END")),
            \(total("CASE WHEN event = 'updated' AND via = 'patch' AND bytes >= 0 AND fullSize > bytes THEN fullSize - bytes ELSE 0 END")),
            \(total("CASE WHEN event = 'usage' AND offlineHits > 0 THEN offlineHits ELSE 0 END"))
        FROM events GROUP BY 1, 2, 3, 4, 5;
        """
    }

    private static let v7 = """
        DROP INDEX IF EXISTS version_moves_app;
        CREATE INDEX IF NOT EXISTS version_moves_version ON version_moves(app, version);
        CREATE INDEX IF NOT EXISTS version_moves_previous ON version_moves(app, previous);
        """

    /// SQLite's steps, in order, each a script.
    static let sqlite: [(name: String, sql: String)] = {
        let total = { (x: String) in "CAST(MIN(TOTAL(\(x)), \(max)) AS INTEGER)" }
        return [
            ("v1", """
                CREATE TABLE events (
                    seq INTEGER PRIMARY KEY,
                    id TEXT NOT NULL,
                    time TEXT NOT NULL,
                    timeMillis INTEGER NOT NULL,
                    device TEXT NOT NULL,
                    app TEXT NOT NULL,
                    event TEXT NOT NULL,
                    version TEXT,
                    previousVersion TEXT,
                    via TEXT,
                    bytes INTEGER NOT NULL,
                    fullSize INTEGER,
                    durationMs INTEGER NOT NULL,
                    errorCode TEXT,
                    message TEXT,
                    offlineHits INTEGER,
                    periodSeconds INTEGER,
                    receivedMillis INTEGER NOT NULL
                );
                CREATE UNIQUE INDEX events_id ON events(id);
                CREATE INDEX events_app ON events(app, event);
                CREATE TABLE fallbacks (
                    eventSeq INTEGER NOT NULL REFERENCES events(seq),
                    reason TEXT NOT NULL,
                    count INTEGER NOT NULL
                );
                CREATE INDEX fallbacks_event ON fallbacks(eventSeq);
                """),
            ("v2", """
                CREATE INDEX events_app_received ON events(app, receivedMillis);
                CREATE INDEX events_app_device ON events(app, device);
                """),
            ("v3", """
                CREATE TABLE version_totals (
                    app TEXT NOT NULL, version TEXT NOT NULL,
                    events INTEGER NOT NULL, updated INTEGER NOT NULL, failed INTEGER NOT NULL, rolledBack INTEGER NOT NULL,
                    bytes INTEGER NOT NULL, bytesSaved INTEGER NOT NULL, offlineHits INTEGER NOT NULL,
                    firstUpdated INTEGER, lastUpdated INTEGER,
                    PRIMARY KEY (app, version)
                ) WITHOUT ROWID;
                CREATE TABLE failure_causes (
                    app TEXT NOT NULL, version TEXT NOT NULL, errorCode TEXT NOT NULL, count INTEGER NOT NULL,
                    PRIMARY KEY (app, version, errorCode)
                ) WITHOUT ROWID;
                CREATE TABLE fallback_totals (
                    app TEXT NOT NULL, reason TEXT NOT NULL, count INTEGER NOT NULL,
                    PRIMARY KEY (app, reason)
                ) WITHOUT ROWID;
                CREATE TABLE devices (
                    app TEXT NOT NULL, device TEXT NOT NULL, version TEXT, timeMillis INTEGER, seq INTEGER,
                    PRIMARY KEY (app, device)
                ) WITHOUT ROWID;
                CREATE INDEX devices_version ON devices(app, version);
                CREATE TABLE version_moves (
                    app TEXT NOT NULL, receivedMillis INTEGER NOT NULL, version TEXT NOT NULL, previous TEXT
                );
                CREATE INDEX version_moves_app ON version_moves(app, receivedMillis);

                INSERT INTO version_totals
                SELECT app, COALESCE(version, ''), COUNT(*), SUM(event = 'updated'), SUM(event = 'failed'),
                    SUM(event = 'rolled-back'), \(total("bytes")),
                    \(total("CASE WHEN event = 'updated' AND via = 'patch' AND fullSize > bytes THEN fullSize - bytes ELSE 0 END")),
                    \(total("CASE WHEN event = 'usage' THEN COALESCE(offlineHits, 0) ELSE 0 END")),
                    MIN(CASE WHEN event = 'updated' THEN receivedMillis END), MAX(CASE WHEN event = 'updated' THEN receivedMillis END)
                FROM events GROUP BY app, COALESCE(version, '');
                INSERT INTO failure_causes
                SELECT app, version, COALESCE(errorCode, ''), COUNT(*) FROM events
                WHERE event = 'failed' AND version IS NOT NULL GROUP BY app, version, COALESCE(errorCode, '');
                INSERT INTO fallback_totals
                SELECT e.app, f.reason, \(total("f.count")) FROM fallbacks f JOIN events e ON e.seq = f.eventSeq GROUP BY e.app, f.reason;
                INSERT INTO devices
                SELECT app, device, version, timeMillis, seq FROM (
                    SELECT app, device, version, timeMillis, seq,
                        ROW_NUMBER() OVER (PARTITION BY app, device ORDER BY timeMillis DESC, seq DESC) AS rank
                    FROM events WHERE event = 'updated' AND version IS NOT NULL
                ) WHERE rank = 1;
                INSERT OR IGNORE INTO devices (app, device) SELECT DISTINCT app, device FROM events;
                INSERT INTO version_moves
                SELECT app, receivedMillis, version, previous FROM (
                    SELECT app, receivedMillis, version,
                        LAG(version) OVER (PARTITION BY app, device ORDER BY timeMillis, seq) AS previous
                    FROM events WHERE event = 'updated' AND version IS NOT NULL
                ) WHERE previous IS NULL OR previous != version;
                """),
            ("v4", v4),
            ("v5", "ALTER TABLE events ADD COLUMN authenticated INTEGER NOT NULL DEFAULT 0;"),
            ("v6", v6(type: "INTEGER", total: total)),
            ("v7", v7),
        ]
    }()

    /// PostgreSQL's steps, in order, each a script.
    static let postgres: [(name: String, sql: String)] = [
        ("v1", """
            CREATE TABLE IF NOT EXISTS events (
                seq BIGSERIAL PRIMARY KEY,
                id TEXT NOT NULL,
                time TEXT NOT NULL,
                timeMillis BIGINT NOT NULL,
                device TEXT NOT NULL,
                app TEXT NOT NULL,
                event TEXT NOT NULL,
                version TEXT,
                previousVersion TEXT,
                via TEXT,
                bytes BIGINT NOT NULL,
                fullSize BIGINT,
                durationMs BIGINT NOT NULL,
                errorCode TEXT,
                message TEXT,
                offlineHits BIGINT,
                periodSeconds BIGINT,
                receivedMillis BIGINT NOT NULL
            );
            CREATE UNIQUE INDEX IF NOT EXISTS events_id ON events(id);
            CREATE INDEX IF NOT EXISTS events_app ON events(app, event);
            CREATE INDEX IF NOT EXISTS events_app_received ON events(app, receivedMillis);
            CREATE INDEX IF NOT EXISTS events_app_device ON events(app, device);
            CREATE TABLE IF NOT EXISTS fallbacks (
                eventSeq BIGINT NOT NULL REFERENCES events(seq),
                reason TEXT NOT NULL,
                count BIGINT NOT NULL
            );
            CREATE INDEX IF NOT EXISTS fallbacks_event ON fallbacks(eventSeq);
            """),
        ("v3", """
            CREATE TABLE version_totals (
                app TEXT NOT NULL, version TEXT NOT NULL,
                events BIGINT NOT NULL, updated BIGINT NOT NULL, failed BIGINT NOT NULL, rolledBack BIGINT NOT NULL,
                bytes BIGINT NOT NULL, bytesSaved BIGINT NOT NULL, offlineHits BIGINT NOT NULL,
                firstUpdated BIGINT, lastUpdated BIGINT,
                PRIMARY KEY (app, version)
            );
            CREATE TABLE failure_causes (
                app TEXT NOT NULL, version TEXT NOT NULL, errorCode TEXT NOT NULL, count BIGINT NOT NULL,
                PRIMARY KEY (app, version, errorCode)
            );
            CREATE TABLE fallback_totals (app TEXT NOT NULL, reason TEXT NOT NULL, count BIGINT NOT NULL, PRIMARY KEY (app, reason));
            CREATE TABLE devices (
                app TEXT NOT NULL, device TEXT NOT NULL, version TEXT, timeMillis BIGINT, seq BIGINT,
                PRIMARY KEY (app, device)
            );
            CREATE INDEX devices_version ON devices(app, version);
            CREATE TABLE version_moves (app TEXT NOT NULL, receivedMillis BIGINT NOT NULL, version TEXT NOT NULL, previous TEXT);
            CREATE INDEX version_moves_app ON version_moves(app, receivedMillis);
            INSERT INTO version_totals
            SELECT app, COALESCE(version, ''), COUNT(*), COUNT(*) FILTER (WHERE event = 'updated'),
                COUNT(*) FILTER (WHERE event = 'failed'), COUNT(*) FILTER (WHERE event = 'rolled-back'), LEAST(SUM(bytes), \(max)),
                LEAST(SUM(CASE WHEN event = 'updated' AND via = 'patch' AND fullSize > bytes THEN fullSize - bytes ELSE 0 END), \(max)),
                LEAST(SUM(CASE WHEN event = 'usage' THEN COALESCE(offlineHits, 0) ELSE 0 END), \(max)),
                MIN(receivedMillis) FILTER (WHERE event = 'updated'), MAX(receivedMillis) FILTER (WHERE event = 'updated')
            FROM events GROUP BY app, COALESCE(version, '');
            INSERT INTO failure_causes
            SELECT app, version, COALESCE(errorCode, ''), COUNT(*) FROM events
            WHERE event = 'failed' AND version IS NOT NULL GROUP BY app, version, COALESCE(errorCode, '');
            INSERT INTO fallback_totals
            SELECT e.app, f.reason, LEAST(SUM(f.count), \(max)) FROM fallbacks f JOIN events e ON e.seq = f.eventSeq GROUP BY e.app, f.reason;
            INSERT INTO devices
            SELECT app, device, version, timeMillis, seq FROM (
                SELECT app, device, version, timeMillis, seq,
                    ROW_NUMBER() OVER (PARTITION BY app, device ORDER BY timeMillis DESC, seq DESC) AS rank
                FROM events WHERE event = 'updated' AND version IS NOT NULL
            ) latest WHERE rank = 1;
            INSERT INTO devices (app, device) SELECT DISTINCT app, device FROM events ON CONFLICT DO NOTHING;
            INSERT INTO version_moves
            SELECT app, receivedMillis, version, previous FROM (
                SELECT app, receivedMillis, version,
                    LAG(version) OVER (PARTITION BY app, device ORDER BY timeMillis, seq) AS previous
                FROM events WHERE event = 'updated' AND version IS NOT NULL
            ) updates WHERE previous IS NULL OR previous != version;
            """),
        ("v4", v4),
        ("v5", "ALTER TABLE events ADD COLUMN IF NOT EXISTS authenticated BOOLEAN NOT NULL DEFAULT false;"),
        ("v6", v6(type: "BIGINT") { "LEAST(SUM(\($0)), \(max))::BIGINT" }),
        ("v7", v7),
    ]
}
