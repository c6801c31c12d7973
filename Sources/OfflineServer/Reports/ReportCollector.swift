import Foundation
import Logging
import OfflineAgent
import OfflinePublish

/// `offline-server`'s fleet report collector: checks `POST /report` batches, stores
/// them (`ReportStorage`), counts them (`ReportMetrics`), answers `/stats`, and hands
/// the apps a batch touched to the auto-halt (`AutoHalter`) when rules are set.
final class ReportCollector: Sendable {
    let store: any ReportStorage
    /// Writes concurrent batches to `store` a transaction at a time.
    let writer: ReportWriter
    let metrics = ReportMetrics()
    let catalog: ReferenceServerCatalog
    let labels: ReportLabels
    let halter: AutoHalter?
    /// Who may post (`ReportAccess`).
    let access: ReportAccess
    /// The per-device rate limit, when `access` sets one: of enrolled devices' reports, by
    /// their proven id; of reports with the shared token and of `POST /enrol`, by the id
    /// they claim (buckets of their own, so a forger claiming an id cannot spend the
    /// device's). Never by source address: kiosks share NAT addresses.
    let deviceLimiter: ReportRateLimiter?
    let claimedLimiter: ReportRateLimiter?
    let enrolLimiter: ReportRateLimiter?

    /// Takes an opened store and restores the counters from it.
    init(
        store: any ReportStorage, catalog: ReferenceServerCatalog, autoHalt: AutoHaltRules?, access: ReportAccess = ReportAccess(),
        logger: Logger
    ) async throws {
        self.store = store
        writer = ReportWriter(store: store)
        self.catalog = catalog
        self.access = access
        deviceLimiter = access.deviceLimit.map { ReportRateLimiter($0) }
        claimedLimiter = access.deviceLimit.map { ReportRateLimiter($0) }
        enrolLimiter = access.deviceLimit.map { ReportRateLimiter($0) }
        // Only apps of the publish directory and versions it published get series of their own.
        labels = ReportLabels { [catalog] app in
            guard AppName.isValid(app), let entry = try? catalog.entry(app: app) else { return nil }
            return Set(entry.state.versions.map(\.version.description))
        }
        let tally: ReportTally
        do {
            tally = try await store.tally(labels: labels)
        } catch {
            throw ServerError(
                .reports, "cannot read the reports database: \(error)", cause: .io, path: store.location, underlying: error)
        }
        metrics.record(tally)
        if let secret = access.secret {
            do {
                try await store.adoptEnrolments(fingerprint: secret.fingerprint)
            } catch {
                throw ServerError(.reports, "cannot read the reports database: \(error)", cause: .io, path: store.location, underlying: error)
            }
        }
        // With enrolment required only devices proven by their credential count toward a halt.
        halter = autoHalt.map {
            AutoHalter(rules: $0, store: store, catalog: catalog, authenticatedOnly: access.requireEnrolment, logger: logger)
        }
        logger.info("fleet reports in \(store.location)")
        if let autoHalt { logger.info("auto-halt: \(autoHalt)") }
    }

    /// A sender past its rate limit: `429` with `Retry-After`, nothing stored.
    struct Throttled: Error, Sendable {
        /// Whole seconds until a request is allowed.
        var wait: Int
    }

    /// `POST /enrol` of `device` under `secret`: true when it enrolled now, false when it
    /// is enrolled already (each id once, docs/PROTOCOL.md "Enrolment"). Throws
    /// `Throttled` past the id's rate limit, a database error when it cannot be recorded.
    func enrol(device: String, secret: CollectorSecret) async throws -> Bool {
        if let wait = enrolLimiter?.take(device) { throw Throttled(wait: wait) }
        return try await store.enrol(device: device, fingerprint: secret.fingerprint, nowMillis: Int64((Date().timeIntervalSince1970 * 1000).rounded(.down)))
    }

    /// What `POST /report` answers with `200`.
    struct Receipt: Sendable, Encodable {
        var accepted: Int
        var duplicates: Int
    }

    /// Checks, stores and counts one body from `sender`. Throws `ReportRefusal` for a body
    /// or event that breaks a rule (nothing stored) — an event naming another device than
    /// the credential's is one —, a database error when storing failed.
    func ingest(_ body: some Collection<UInt8>, from sender: ReportAccess.Sender = .anyone) async throws -> Receipt {
        let batch = try ReportBatch(body: body)
        var authenticated = false
        if case .device(let device) = sender {
            // Byte for byte, as the database compares: Swift's == is canonical equivalence,
            // under which "K" (U+004B) equals the Kelvin sign (U+212A), so one credential
            // would speak for every such spelling of its id, each another device in SQL.
            if let index = batch.events.firstIndex(where: { !$0.device.utf8.elementsEqual(device.utf8) }) {
                throw ReportRefusal("event \(index): a device's credential speaks for its own device only")
            }
            authenticated = true
        } else if sender == .fleet, let claimedLimiter {
            // The shared token proves no id: limited by each id the batch claims.
            for device in Set(batch.events.map(\.device)).sorted() {
                if let wait = claimedLimiter.take(device) { throw Throttled(wait: wait) }
            }
        }
        let insertion = try await writer.insert(ReportWrite(events: batch.events, authenticated: authenticated))
        var tally = ReportTally(labels: labels)
        for event in insertion.inserted { tally.add(event) }
        metrics.record(tally)
        // Only stored events can trip a rule: a duplicate adds nothing to the figures.
        if let halter, !insertion.inserted.isEmpty {
            await halter.check(apps: Set(insertion.inserted.map(\.app)))
        }
        return Receipt(accepted: insertion.inserted.count, duplicates: insertion.duplicates)
    }

    /// `/stats?app=NAME`: the stored figures and what the publish directory says now.
    func stats(app: String, now: Date = Date()) async throws -> AppStats {
        let state = (try? catalog.entry(app: app))?.state
        var stats = try await store.stats(app: app, keeping: state?.latest.description)
        if let state { stats.apply(state, now: now) }
        stats.metadata = TUFRepository.expiryNotices(publishDirectory: catalog.directory, now: now, expiry: catalog.metadataExpiry)
        return stats
    }
}
