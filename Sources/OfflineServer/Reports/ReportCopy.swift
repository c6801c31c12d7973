import Foundation
import Logging
import OfflineAgent

/// `offline-server copy-reports`: copies a SQLite report history into PostgreSQL, so
/// moving a collector to a shared database keeps its history (docs/FLEET.md).
///
/// Events go in the order they were stored, in their original batches (same receipt
/// time, same sender kind), through the PostgreSQL store's own insert: the running sums,
/// the devices and the adoption chart come out as if the devices had posted there. Ids
/// already in PostgreSQL are duplicates, so running it again, or after servers on
/// PostgreSQL took new reports, copies nothing twice.
public enum ReportCopy {
    /// What a copy did.
    public struct Result: Sendable, Equatable {
        /// Events stored in PostgreSQL now.
        public var copied = 0
        /// Events whose id PostgreSQL already held.
        public var duplicates = 0
        /// Events today's rules refuse (an older server stored them), left out.
        public var refused = 0
        /// Enrolled device ids recorded in PostgreSQL now (`offline-server reenrol`): an id
        /// enrolled on SQLite stays enrolled, so the move frees no id for the fleet token.
        public var enrolled = 0
    }

    /// Copies every event of the SQLite database at `sqlite` into the PostgreSQL database at `postgres`.
    public static func copy(from sqlite: String, to postgres: String, logger: Logger) async throws -> Result {
        guard FileManager.default.fileExists(atPath: sqlite) else {
            throw ServerError(.usage, "no such SQLite reports database", path: sqlite)
        }
        guard PostgresReportStore.isURL(postgres) else {
            throw ServerError(.usage, "--to must be a postgres:// URL")
        }
        let source = try await ReportStore.open(path: sqlite)
        let target = try await PostgresReportStore.open(url: postgres, logger: logger)
        do {
            let result = try await copy(source, into: target)
            await source.close()
            await target.close()
            return result
        } catch {
            await source.close()
            await target.close()
            throw error
        }
    }

    private static func copy(_ source: ReportStore, into target: PostgresReportStore) async throws -> Result {
        var result = Result()
        var afterSeq: Int64 = 0
        while true {
            let page = try await source.stored(afterSeq: afterSeq, limit: 5000)
            guard let last = page.last else {
                result.enrolled = try await target.addEnrolments(try await source.enrolments())
                return result
            }
            afterSeq = last.seq
            var start = page.startIndex
            while start < page.endIndex {
                // One original batch: the same receipt time and sender kind, at most 500 events.
                let first = page[start]
                var end = start + 1
                while end < page.endIndex, end - start < ReportBatch.maxEvents, page[end].receivedMillis == first.receivedMillis,
                      page[end].authenticated == first.authenticated { end += 1 }
                let events = page[start..<end].compactMap(\.event)
                result.refused += end - start - events.count
                if !events.isEmpty {
                    let write = ReportWrite(events: events, authenticated: first.authenticated)
                    for insertion in try await target.insert([write], receivedMillis: first.receivedMillis) {
                        result.copied += insertion.inserted.count
                        result.duplicates += insertion.duplicates
                    }
                }
                start = end
            }
        }
    }
}
