import Foundation
import GRDB

extension ReportStore {
    /// One stored event as `ReportCopy` reads it: the event (nil when today's rules would
    /// refuse it: an older server stored it), its receipt time and whether a device's own
    /// credential sent it.
    struct Stored: Sendable {
        var seq: Int64
        var receivedMillis: Int64
        var authenticated: Bool
        var event: ReportEvent?
    }

    /// Every enrolled device id, with the fingerprint of its secret and when it enrolled.
    func enrolments() async throws -> [(device: String, secret: String, enrolledMillis: Int64)] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT device, secret, enrolledMillis FROM enrolled_devices ORDER BY device").map { ($0[0], $0[1], $0[2]) }
        }
    }

    /// Up to `limit` stored events after `afterSeq`, in the order they were stored, each
    /// read back through the wire format's checks (`ReportEvent`), fallbacks included.
    func stored(afterSeq: Int64, limit: Int) async throws -> [Stored] {
        try await pool.read { db in
            let rows = try Row.fetchAll(db, sql: """
                SELECT seq, receivedMillis, authenticated, id, time, device, app, event, version, previousVersion, via,
                    bytes, fullSize, durationMs, errorCode, message, offlineHits, periodSeconds
                FROM events WHERE seq > ? ORDER BY seq LIMIT ?
                """, arguments: [afterSeq, limit])
            guard let first = rows.first?[0] as Int64?, let last = rows.last?[0] as Int64? else { return [] }
            var fallbacks: [Int64: [String: Int64]] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT eventSeq, reason, count FROM fallbacks WHERE eventSeq BETWEEN ? AND ?",
                                        arguments: [first, last]) {
                fallbacks[row[0], default: [:]][row[1]] = row[2]
            }
            let keys = ["id", "time", "device", "app", "event", "version", "previousVersion", "via", "bytes", "fullSize",
                        "durationMs", "errorCode", "message", "offlineHits", "periodSeconds"]
            return rows.map { row in
                let seq: Int64 = row[0]
                var object: [String: Any] = [:]
                for (index, key) in keys.enumerated() {
                    let value = row[index + 3] as DatabaseValue
                    switch value.storage {
                    case .int64(let number): object[key] = number
                    case .string(let text): object[key] = text
                    case .double(let number): object[key] = number
                    default: break
                    }
                }
                if let reasons = fallbacks[seq] { object["fallbacks"] = reasons }
                let event = (try? JSONSerialization.data(withJSONObject: object)).flatMap { try? JSONDecoder().decode(ReportEvent.self, from: $0) }
                return Stored(seq: seq, receivedMillis: row[1], authenticated: (row[2] as Int64?) == 1, event: event)
            }
        }
    }
}
