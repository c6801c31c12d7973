/// The `/metrics` fleet counters as stored sums, kept in table `report_counters` in the
/// transaction of every batch (`ReportRollup.counters`), so a start restores them by
/// reading one row per key instead of every stored event: start time follows the
/// fleet's size (apps, versions, error codes), not its history.
///
/// A key keeps the values as devices sent them, so `ReportTally` applies the label rules
/// of the publish directory the server starts with (a version published since counts
/// under its own name, as a recount of the events would): `version` and `via` of an
/// `updated` event, `errorCode` of a `failed` one, each `""` when absent (the wire format
/// refuses empty strings) and for every other kind, where no series names them.
///
/// The sums are exactly what `ReportTally` adds per event, held at 2^63 − 1: a negative
/// stored number (only an older server let one in) adds 0, so saturating sums of these
/// are the same whatever the order of the batches.
struct ReportCounters: Sendable {
    struct Key: Hashable, Comparable, Sendable {
        var app: String
        var event: String
        var version: String
        var via: String
        var errorCode: String

        init(app: String, event: String, version: String, via: String, errorCode: String) {
            (self.app, self.event, self.version, self.via, self.errorCode) = (app, event, version, via, errorCode)
        }

        init(_ event: ReportEvent) {
            let updated = event.event == .updated, failed = event.event == .failed
            self.init(
                app: event.app, event: event.event.rawValue, version: updated ? event.version ?? "" : "",
                via: updated ? event.via?.rawValue ?? "" : "", errorCode: failed ? event.errorCode ?? "" : "")
        }

        static func < (a: Self, b: Self) -> Bool {
            (a.app, a.event, a.version, a.via, a.errorCode) < (b.app, b.event, b.version, b.via, b.errorCode)
        }
    }

    struct Sums: Sendable, Equatable {
        var events: Int64 = 0
        /// `bytes` of every event (downloaded bytes).
        var bytes: Int64 = 0
        /// `fullSize − bytes` of `updated` events `via: patch` that say a larger `fullSize`.
        var bytesSaved: Int64 = 0
        /// `offlineHits` of `usage` events.
        var offlineHits: Int64 = 0

        /// One event's share.
        init(_ event: ReportEvent) {
            events = 1
            bytes = max(0, event.bytes)
            if event.event == .updated, event.via == .patch, let fullSize = event.fullSize, event.bytes >= 0, fullSize > event.bytes {
                bytesSaved = fullSize - event.bytes
            }
            if event.event == .usage { offlineHits = max(0, event.offlineHits ?? 0) }
        }

        init(events: Int64, bytes: Int64, bytesSaved: Int64, offlineHits: Int64) {
            (self.events, self.bytes, self.bytesSaved, self.offlineHits) = (events, bytes, bytesSaved, offlineHits)
        }

        mutating func add(_ other: Sums) {
            events = events.adding(saturating: max(0, other.events))
            bytes = bytes.adding(saturating: max(0, other.bytes))
            bytesSaved = bytesSaved.adding(saturating: max(0, other.bytesSaved))
            offlineHits = offlineHits.adding(saturating: max(0, other.offlineHits))
        }
    }

    private(set) var sums: [Key: Sums] = [:]

    mutating func add(_ event: ReportEvent) {
        sums[Key(event), default: Sums(events: 0, bytes: 0, bytesSaved: 0, offlineHits: 0)].add(Sums(event))
    }

    /// The sums in key order (rows are locked in one order by every writer).
    var sorted: [(key: Key, sums: Sums)] { sums.sorted { $0.key < $1.key }.map { ($0.key, $0.value) } }

    /// The columns of `report_counters` after its key, in the order `ReportSQL.addCounters` and `migration` use.
    static let columns = ["events", "bytes", "bytesSaved", "offlineHits"]

    /// Migration `v6` of `ReportSchema`: the table, then the sums of the events already
    /// stored, each held at 2^63 − 1 (`SQLDialect.total`).
    static func migration(_ dialect: SQLDialect) -> [String] {
        let type = dialect.integer, total = dialect.total
        return [
            """
            CREATE TABLE report_counters (
                app TEXT NOT NULL, event TEXT NOT NULL, version TEXT NOT NULL, via TEXT NOT NULL, errorCode TEXT NOT NULL,
                events \(type) NOT NULL, bytes \(type) NOT NULL, bytesSaved \(type) NOT NULL, offlineHits \(type) NOT NULL,
                PRIMARY KEY (app, event, version, via, errorCode)
            )
            """,
            // The same rules as `Key(_:)` and `Sums(_:)`, in SQL both dialects read alike.
            """
            INSERT INTO report_counters (app, event, version, via, errorCode, events, bytes, bytesSaved, offlineHits)
            SELECT app, event,
                CASE WHEN event = 'updated' THEN COALESCE(version, '') ELSE '' END,
                CASE WHEN event = 'updated' THEN COALESCE(via, '') ELSE '' END,
                CASE WHEN event = 'failed' THEN COALESCE(errorCode, '') ELSE '' END,
                COUNT(*), \(total("CASE WHEN bytes > 0 THEN bytes ELSE 0 END")),
                \(total("CASE WHEN event = 'updated' AND via = 'patch' AND bytes >= 0 AND fullSize > bytes THEN fullSize - bytes ELSE 0 END")),
                \(total("CASE WHEN event = 'usage' AND offlineHits > 0 THEN offlineHits ELSE 0 END"))
            FROM events GROUP BY 1, 2, 3, 4, 5
            """,
        ]
    }
}
