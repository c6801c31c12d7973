/// The report stores' statements, each written once with `?` placeholders in SQL that
/// SQLite and PostgreSQL read alike; each store renders them (`SQLDialect.render`) and
/// binds the same arguments in the same order, so a figure or a rule is in one place.
///
/// What stays each store's own is how a batch's rows reach the database: PostgreSQL
/// reads a whole batch of events, fallbacks, counters, devices and moves from arrays
/// (`unnest`) in one statement each, where a statement per row would cost a round trip
/// per row; SQLite has no arrays and no round trips, and runs a prepared statement per
/// row. The sums and the rule they add by (`ReportRollup`) are the same.
enum ReportSQL {
    /// `(?, ?, …)`: `count` placeholders for `IN`.
    static func list(_ count: Int) -> String {
        "(" + Array(repeating: "?", count: count).joined(separator: ", ") + ")"
    }

    /// `column = stored + added` for each of `columns` of `table`, saturating (`ReportRollup.saturatingSum`).
    static func sums(_ table: String, _ columns: [String]) -> String {
        columns.map { "\($0) = \(ReportRollup.saturatingSum("\(table).\($0)", "excluded.\($0)"))" }.joined(separator: ", ")
    }

    /// The earlier (`<`) or later (`>`) of `stored` and `added`, either of which may be NULL
    /// (none yet): SQLite's two-argument `MIN` is NULL then, PostgreSQL's `LEAST` is not.
    private static func either(_ stored: String, _ compare: String, _ added: String) -> String {
        "CASE WHEN \(added) IS NULL OR \(stored) \(compare)= \(added) THEN \(stored) ELSE \(added) END"
    }

    // MARK: Writing (the batch's transaction)

    /// A batch's sums of one app and version added to the running ones: app, version,
    /// events, updated, failed, rolledBack, bytes, bytesSaved, offlineHits, firstUpdated, lastUpdated.
    static let addVersionTotals = """
        INSERT INTO version_totals (app, version, events, updated, failed, rolledBack, bytes, bytesSaved, offlineHits,
            firstUpdated, lastUpdated)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
        ON CONFLICT (app, version) DO UPDATE SET
            \(sums("version_totals", ["events", "updated", "failed", "rolledBack", "bytes", "bytesSaved", "offlineHits"])),
            firstUpdated = \(either("version_totals.firstUpdated", "<", "excluded.firstUpdated")),
            lastUpdated = \(either("version_totals.lastUpdated", ">", "excluded.lastUpdated"))
        """

    /// App, version, error code, count.
    static let addFailureCause = """
        INSERT INTO failure_causes (app, version, errorCode, count) VALUES (?, ?, ?, ?)
        ON CONFLICT (app, version, errorCode) DO UPDATE SET \(sums("failure_causes", ["count"]))
        """

    /// App, reason, count.
    static let addFallbackTotal = """
        INSERT INTO fallback_totals (app, reason, count) VALUES (?, ?, ?)
        ON CONFLICT (app, reason) DO UPDATE SET \(sums("fallback_totals", ["count"]))
        """

    /// The `/metrics` counters' sums (`ReportCounters`) added, from `rows`: a `VALUES` or a
    /// `SELECT` of app, event, version, via, errorCode, events, bytes, bytesSaved, offlineHits.
    static func addCounters(from rows: String) -> String {
        """
        INSERT INTO report_counters (app, event, version, via, errorCode, events, bytes, bytesSaved, offlineHits)
        \(rows)
        ON CONFLICT (app, event, version, via, errorCode) DO UPDATE SET \(sums("report_counters", ReportCounters.columns))
        """
    }

    // MARK: Enrolment

    /// Enrols a device id under the collector secret of a fingerprint
    /// (`CollectorSecret.fingerprint`) unless it is enrolled under that secret already;
    /// answers the id when it enrolled now, nothing when it was refused. An id enrolled
    /// under an older secret enrols again (a new secret voids every credential). Arguments:
    /// device, fingerprint, now (ms).
    static let enrol = """
        INSERT INTO enrolled_devices (device, secret, enrolledMillis) VALUES (?, ?, ?)
        ON CONFLICT (device) DO UPDATE SET secret = excluded.secret, enrolledMillis = excluded.enrolledMillis
        WHERE enrolled_devices.secret != excluded.secret
        RETURNING device
        """

    /// The ids `v9` enrolled from the stored events get the fingerprint of the secret the
    /// first start after it holds (fingerprint).
    static let adoptEnrolments = "UPDATE enrolled_devices SET secret = ? WHERE secret = ''"

    /// Lets an id enrol again (`offline-server reenrol`): answers it when it was enrolled. Argument: device.
    static let releaseEnrolment = "DELETE FROM enrolled_devices WHERE device = ? RETURNING device"

    // MARK: Reading

    /// The `/metrics` counters (`ReportStorage.tally`).
    static let counters = "SELECT app, event, version, via, errorCode, events, bytes, bytesSaved, offlineHits FROM report_counters"

    /// Every app's fallback sums.
    static let fallbackTotals = "SELECT app, reason, count FROM fallback_totals"

    /// `/stats` of one app (app): its sums per version.
    static let versionTotals = """
        SELECT version, events, updated, failed, rolledBack, bytes, bytesSaved, offlineHits FROM version_totals WHERE app = ?
        """

    /// `/stats` of one app (app): devices per version they are on now.
    static let devicesPerVersion = """
        SELECT version, COUNT(*) FROM devices WHERE app = ? AND version IS NOT NULL AND version != '' GROUP BY version
        """

    /// `/stats` of one app (app): its fallback sums.
    static let fallbackReasons = "SELECT reason, count FROM fallback_totals WHERE app = ?"

    /// Devices that sent any event about one app (app).
    static let knownDevices = "SELECT COUNT(*) FROM devices WHERE app = ?"

    /// The failure causes of `count` versions of one app (app, then each version).
    static func failureCauses(versions count: Int) -> String {
        "SELECT version, errorCode, count FROM failure_causes WHERE app = ? AND version IN \(list(count))"
    }

    /// The adoption chart's span (app): the first and last update's receipt time.
    static let adoptionRange = "SELECT MIN(firstUpdated), MAX(lastUpdated) FROM version_totals WHERE app = ?"

    /// The adoption chart's moves into `count` versions, then out of one into another, per
    /// slice: two index searches (an OR of the two, without SQLite's ANALYZE statistics,
    /// scans every move of the app). Integer division truncates alike in both. Arguments:
    /// from, buckets, to, from, app, the versions, app, the versions, the versions.
    static func adoptionMoves(versions count: Int) -> String {
        """
        SELECT (receivedMillis - ?) * ? / (? - ? + 1) AS bucket, version, previous, COUNT(*) FROM (
            SELECT receivedMillis, version, previous FROM version_moves WHERE app = ? AND version IN \(list(count))
            UNION ALL
            SELECT receivedMillis, version, previous FROM version_moves
            WHERE app = ? AND previous IN \(list(count)) AND version NOT IN \(list(count))
        ) moves GROUP BY bucket, version, previous
        """
    }

    /// `--auto-halt`'s figures (`ReportStorage.rolloutDevices`), per device, 1 or 0 each:
    /// updated to the version, failed on it, rolled back or marked bad from it. Arguments:
    /// version, version, version, app, since (ms), version, version, authenticated only.
    static let rolloutDevices = """
        SELECT device,
            MAX(CASE WHEN event = 'updated' AND version = ? THEN 1 ELSE 0 END),
            MAX(CASE WHEN event = 'failed' AND version = ? THEN 1 ELSE 0 END),
            MAX(CASE WHEN event IN ('rolled-back', 'marked-bad') AND previousVersion = ? THEN 1 ELSE 0 END)
        FROM events
        WHERE app = ? AND receivedMillis >= ? AND (version = ? OR previousVersion = ?) AND (NOT ? OR authenticated)
        GROUP BY device
        """
}
