/// How many devices ran each version over time, for the dashboard's chart: the span
/// of the app's `updated` events by the server's receipt time (devices' clocks may be
/// wrong; the server's is one clock for all), cut into `buckets` equal slices, and per
/// version the number of devices whose latest move (`updated`, `rolled-back`,
/// `marked-bad`, in arrival order: `ReportRollup.Latest`) put them on it at the end of each slice (a move
/// received after the last `updated` counts in the last slice). The last point of each line equals `/stats`'s `devices`.
struct AdoptionSeries: Sendable, Equatable {
    /// Receipt time of the first and last `updated` event (ms since 1970); equal when one.
    var fromMillis: Int64 = 0
    var toMillis: Int64 = 0
    /// Per version, devices on it at the end of each slice.
    var lines: [String: [Int64]] = [:]

    /// Slices the span is cut into.
    static let buckets = 60

    /// Migration `v7` of both stores: `version_moves` indexed by the version moved to and
    /// the one moved from, so the chart reads the moves of the versions it draws (its
    /// index by receipt time led every read through every move of the app). Each step may
    /// run again (a database whose sums were dropped and filled anew).
    static let movesIndexes = [
        "DROP INDEX IF EXISTS version_moves_app",
        "CREATE INDEX IF NOT EXISTS version_moves_version ON version_moves(app, version)",
        "CREATE INDEX IF NOT EXISTS version_moves_previous ON version_moves(app, previous)",
    ]

    /// One group of the store's answer: `count` devices moved from `previous` (nil: from
    /// nothing reported) to `version` within slice `bucket`.
    struct Move: Sendable {
        var bucket: Int
        var version: String
        var previous: String?
        var count: Int64
    }

    init() {}

    /// Adds up the moves into lines, one point per slice.
    init(fromMillis: Int64, toMillis: Int64, moves: [Move]) {
        self.fromMillis = fromMillis
        self.toMillis = toMillis
        var deltas: [String: [Int64]] = [:]
        for move in moves {
            let bucket = min(max(move.bucket, 0), Self.buckets - 1)
            // A move to or from no version (`ReportRollup.none`) draws no line.
            if move.version != ReportRollup.none {
                deltas[move.version, default: Array(repeating: 0, count: Self.buckets)][bucket] += move.count
            }
            if let previous = move.previous, previous != ReportRollup.none {
                deltas[previous, default: Array(repeating: 0, count: Self.buckets)][bucket] -= move.count
            }
        }
        for (version, delta) in deltas {
            var running: Int64 = 0
            lines[version] = delta.map { running = running.adding(saturating: $0); return max(0, running) }
        }
    }

    /// The most devices any version had at any point (the chart's height).
    var peak: Int64 { lines.values.flatMap { $0 }.max() ?? 0 }
}
