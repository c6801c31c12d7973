import Foundation
import Logging
import OfflineAgent

/// `offline-server reenrol`: the way out of "enrolled" for a device id (docs/FLEET.md,
/// "Turn enrolment on"). Each id enrols once (`POST /enrol` answers `409` after), so a
/// device reset or replaced under the same id, or one that lost the answer to its
/// enrolment, needs the operator to let it enrol again.
public enum ReportEnrolment {
    /// Lets `device` enrol again in the reports database at `database` (a SQLite path or a
    /// `postgres://` URL); whether it was enrolled. A `usage` error for an id no device
    /// may have or a SQLite file that does not exist; a `reports` error when the database
    /// cannot be opened or written.
    public static func release(device: String, database: String, logger: Logger) async throws -> Bool {
        guard ReportCredential.isValidDevice(device) else {
            throw ServerError(.usage, "--device must be \(ReportCredential.deviceRule)")
        }
        let store: any ReportStorage
        if PostgresReportStore.isURL(database) {
            store = try await PostgresReportStore.open(url: database, logger: logger)
        } else {
            try ReferenceServer.checkPath(database)
            guard FileManager.default.fileExists(atPath: database) else {
                throw ServerError(.usage, "no such SQLite reports database", path: database)
            }
            store = try await ReportStore.open(path: database)
        }
        do {
            let enrolled = try await store.releaseEnrolment(device: device)
            await store.close()
            return enrolled
        } catch {
            await store.close()
            throw ServerError(.reports, "cannot record the enrolment: \(error)", cause: .io, path: store.location, underlying: error)
        }
    }
}
