import Foundation
import Logging
import OfflineAgent

/// `offline-server`'s fleet report collector: checks `POST /report` batches, stores
/// them (`ReportStore`), counts them (`ReportMetrics`) and answers `/stats`.
final class ReportCollector: Sendable {
    let store: ReportStore
    let metrics = ReportMetrics()

    /// Opens the database at `path` and restores the counters from it.
    init(databasePath: String, logger: Logger) throws {
        store = try ReportStore(path: databasePath)
        let tally: ReportTally
        do {
            tally = try store.tally()
        } catch {
            throw OfflineAgentError(
                .serve, "cannot read the reports database: \(error)", cause: .io, path: databasePath, underlying: error)
        }
        metrics.record(tally)
        logger.info("fleet reports in \(databasePath)")
    }

    /// What `POST /report` answers with `200`.
    struct Receipt: Sendable, Encodable {
        var accepted: Int
        var duplicates: Int
    }

    /// Checks, stores and counts one body. Throws `ReportRefusal` for a body or event
    /// that breaks a rule (nothing stored), a database error when storing failed.
    func ingest(_ body: some Collection<UInt8>) async throws -> Receipt {
        let batch = try ReportBatch(body: body)
        let insertion = try await store.insert(batch.events)
        var tally = ReportTally()
        for event in insertion.inserted { tally.add(event) }
        metrics.record(tally)
        return Receipt(accepted: insertion.inserted.count, duplicates: insertion.duplicates)
    }
}
