import AsyncHTTPClient
import FoundationEssentials
import Logging
import NIOCore
import NIOHTTP1

/// Sends the queued events of every collector of a root, oldest first, in batches.
///
/// The work is bounded by a count, not by the wall clock: a flush sends each queue's
/// events as they stood when it began, at most `ceil(pending / batchSize)` requests per
/// queue, and each request (connect, send, answer) may take `ReportSettings.deadline`.
/// So a slow CPU (a busy kiosk, a loaded test machine) still gets its queue out, and a
/// collector that stalls costs one deadline: its queue then backs off.
///
/// 2xx acknowledges a batch; 400 and 413 drop it for good (counted as `rejected`, so
/// one bad event never wedges the queue); anything else — no answer, 429, 503, 401 and
/// 403 (a missing or wrong `reportToken`), other statuses — leaves it queued and backs
/// the queue off (`ReportSettings.backoff`, or a later `Retry-After`), persisted so a
/// down collector isn't asked at every sync. A failure is logged once per flush and
/// never thrown. A queue's recorded token (`ReportQueue.token()`) goes with each POST
/// to that queue's URL, and nowhere else: redirects are not followed.
///
/// Enrolment (docs/PROTOCOL.md, "Enrolment"): a queue with a token and no credential for
/// this root's device id first asks the collector's `POST /enrol` for one, records it
/// (`ReportQueue.credential()`, 0600) and sends it instead of the token
/// (`Authorization: Device ID:CREDENTIAL`). A collector without enrolment (`404`) keeps
/// getting the token. A `401` to a credential (the collector's secret changed) enrols
/// once more and resends the batch, at most once a flush. A `409` to the enrolment (this
/// id enrolled before, its credential lost) keeps the token; where the collector requires
/// enrolment the queue backs off with a warning naming `offline-server reenrol`.
package struct ReportSender: Sendable {
    package let root: String
    package let settings: ReportSettings
    package let network: NetworkSettings
    package let clock: @Sendable () -> Date
    package let logger: Logger
    package let pool: BlockingPool

    package init(
        root: String, settings: ReportSettings, network: NetworkSettings, clock: @escaping @Sendable () -> Date,
        logger: Logger = Logger(label: "offline-agent"), pool: BlockingPool
    ) {
        self.root = root
        self.settings = settings
        self.network = network
        self.clock = clock
        self.logger = logger
        self.pool = pool
    }

    /// Sends what is due; returns what happened.
    @discardableResult
    package func flush() async -> ReportFlush {
        var outcome = ReportFlush()
        // Listing and the due check only stat: a root that reports nothing starts no thread.
        let due = ReportQueue.all(root: root, maxEvents: settings.maxQueuedEvents).filter { isDue($0) }
        guard !due.isEmpty else { return outcome }
        var settings = network
        // The deadline bounds each request's every wait; a shorter read timeout would only cut a slow answer short.
        settings.connectTimeout = min(settings.connectTimeout, self.settings.deadline)
        settings.readTimeout = self.settings.deadline
        let fetcher = HTTPFetcher(settings: settings, logger: logger)
        for queue in due {
            await send(queue, fetcher: fetcher, outcome: &outcome)
        }
        await fetcher.shutdown()
        return outcome
    }

    /// True when the queue holds events and is not backing off.
    private func isDue(_ queue: ReportQueue) -> Bool {
        let state = queue.loadState()
        if let next = state.nextAttempt {
            let wait = next - clock().timeIntervalSince1970
            // A wait longer than any backoff or Retry-After comes from a clock set back: ignore it.
            if wait > 0, wait <= settings.backoff.longest { return false }
        }
        return queue.pending() > 0
    }

    private func send(_ queue: ReportQueue, fetcher: HTTPFetcher, outcome: inout ReportFlush) async {
        let batchSize = min(max(1, settings.batchSize), 500)
        guard let lock = try? await pool.run(.install, { ReportSendLock(directory: queue.directory) }) else { return }
        defer { withExtendedLifetime(lock) {} }
        do {
            // The token recorded with this queue goes to its own URL only; the client follows no redirect.
            let token = try await pool.run(.install) { queue.token() }
            var credential = try await pool.run(.install) { queue.credential() }
            let device = try? await pool.run(.install) { [root] in try DeviceID.load(root: root) }
            // A collector that said it enrols nobody is asked again a day later, or at once when it refuses the token.
            let enrolWanted = device.map { credential?.device != $0 && ReportCredential.isValidDevice($0) } ?? false
            // Set when the collector answers 409: this id is enrolled already, and only the operator can free it.
            var enrolledAlready = false
            if let token, let device, enrolWanted, !queue.enrolmentRefusedRecently(now: clock()) {
                credential = await enrol(queue, device: device, token: token, fetcher: fetcher, enrolledAlready: &enrolledAlready) ?? credential
            }
            var reenrolled = false
            var sentUpTo = Int.min
            // What was queued when the flush began, in batches: events queued meanwhile wait
            // for the next flush, so the loop ends whatever the collector and the clock do.
            let requests = try await pool.run(.install) { (queue.pending() + batchSize - 1) / batchSize }
            for _ in 0..<requests {
                guard let batch = try await pool.run(.install, { try queue.batch(limit: batchSize) }) else { return }
                // The queue did not move past the last batch (its state cannot be written): no resending in a loop.
                guard batch.end > sentUpTo else { return }
                sentUpTo = batch.end
                var response: HTTPClientResponse
                var answer: String
                repeat {
                    let authorization = credential?.authorization ?? token.map { "Bearer \($0)" }
                    ReportCrashPoint.beforePost.hit()
                    do {
                        (response, answer) = try await post(batch.body, to: queue.url, authorization: authorization, fetcher: fetcher)
                    } catch {
                        try await failed(queue, reason: HTTPFetcher.describe(error), retryAfter: nil, outcome: &outcome)
                        return
                    }
                    // A credential refused (a new collector secret), or the token refused by a collector
                    // that now requires enrolment: enrol (again), once a flush, and resend.
                    guard response.status.code == 401, credential != nil || enrolWanted, let token, let device, !reenrolled, !enrolledAlready else { break }
                    reenrolled = true
                    guard let fresh = await enrol(queue, device: device, token: token, fetcher: fetcher, enrolledAlready: &enrolledAlready) else { break }
                    credential = fresh
                } while true
                switch response.status.code {
                case 200..<300:
                    try await pool.run(.install, cancellable: false) { try queue.acknowledge(batch, rejected: false) }
                    outcome.delivered += batch.lines.count
                    logger.debug("reports: \(batch.lines.count) events delivered to \(queue.url.absoluteString): \(answer.prefix(200))")
                case 400, 413:
                    try await pool.run(.install, cancellable: false) { try queue.acknowledge(batch, rejected: true) }
                    outcome.rejected += batch.lines.count
                    let reason = answer.split(whereSeparator: \.isNewline).first.map(String.init) ?? ""
                    logger.warning("reports: \(queue.url.absoluteString) refused \(batch.lines.count) events (HTTP \(response.status.code) \(reason.prefix(200))): dropped")
                case 401, 403:
                    // Kept and backed off like any failure: fixing the device config delivers the queue.
                    let reason = if enrolledAlready, let device {
                        "HTTP \(response.status.code): the collector requires enrolment and device id \(device) is enrolled already (409); "
                            + "the operator lets it enrol again with `offline-server reenrol --device \(device)`"
                    } else if token == nil && credential == nil {
                        "HTTP \(response.status.code): the collector wants a bearer token; set reportToken in the device config"
                    } else {
                        "HTTP \(response.status.code): the collector refused the \(credential == nil ? "bearer token" : "device credential"); check reportToken in the device config"
                    }
                    try await failed(queue, reason: reason, retryAfter: nil, outcome: &outcome, needsPerson: true)
                    return
                default:
                    let retryAfter = response.headers.retryAfter(now: clock())
                    try await failed(queue, reason: "HTTP \(response.status.code)", retryAfter: retryAfter, outcome: &outcome)
                    return
                }
            }
        } catch {
            logger.notice("reports: queue \(queue.directory) unusable: \(error)")
        }
    }

    /// POSTs one batch; the answer's first 64 KiB as text.
    private func post(
        _ body: [UInt8], to url: URL, authorization: String?, fetcher: HTTPFetcher
    ) async throws -> (HTTPClientResponse, String) {
        var request = HTTPClientRequest(url: url.absoluteString)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.headers.add(name: "User-Agent", value: AgentVersion.userAgent)
        if let authorization { request.headers.add(name: "Authorization", value: authorization) }
        request.body = .bytes(ByteBuffer(bytes: body))
        let response = try await fetcher.client.execute(request, deadline: NIODeadline.now() + .init(settings.deadline))
        let answer = String(decoding: (try await response.body.collect(upTo: 64 << 10)).readableBytesView, as: UTF8.self)
        return (response, answer)
    }

    /// Asks the collector beside `queue`'s URL (`POST /enrol`) for `device`'s credential with
    /// the fleet token and records it; nil when the collector gives none (no enrolment there:
    /// the token is sent as before) or it cannot be recorded. Sets `enrolledAlready` on `409`
    /// (the id was enrolled before: a device reset or replaced, or the answer lost on the way).
    private func enrol(
        _ queue: ReportQueue, device: String, token: String, fetcher: HTTPFetcher, enrolledAlready: inout Bool
    ) async -> ReportCredential? {
        let url = ReportCredential.enrolURL(report: queue.url)
        let body = Array((try? JSONEncoder().encode(["device": device])) ?? Data())
        do {
            let (response, answer) = try await post(body, to: url, authorization: "Bearer \(token)", fetcher: fetcher)
            guard response.status.code == 200 else {
                if response.status.code == 409 {
                    enrolledAlready = true
                    let reason = answer.split(whereSeparator: \.isNewline).first.map(String.init) ?? ""
                    logger.warning("reports: \(url.absoluteString) will not enrol \(device) again (HTTP 409 \(reason.prefix(200)))")
                    return nil
                }
                logger.debug("reports: \(url.absoluteString) enrols no device (HTTP \(response.status.code))")
                if response.status.code == 404 || response.status.code == 405 {
                    try? await pool.run(.install, cancellable: false) { [clock] in try queue.rememberEnrolmentRefused(at: clock()) }
                }
                return nil
            }
            guard let credential = try? JSONDecoder().decode(ReportCredential.self, from: Data(answer.utf8)),
                  credential.isValid, credential.device == device else {
                logger.notice("reports: \(url.absoluteString) answered no valid credential")
                return nil
            }
            try await pool.run(.install, cancellable: false) {
                try queue.remember(credential: credential)
                try queue.rememberEnrolmentRefused(at: nil)
            }
            logger.info("reports: enrolled with \(url.absoluteString) as \(device)")
            return credential
        } catch {
            logger.notice("reports: enrolment with \(url.absoluteString) failed: \(error)")
            return nil
        }
    }

    /// Backs the queue off and says so, once: as a warning when only a person can fix it
    /// (a sync without `--verbose` shows warnings), else as a notice.
    private func failed(
        _ queue: ReportQueue, reason: String, retryAfter: Date?, outcome: inout ReportFlush, needsPerson: Bool = false
    ) async throws {
        let now = clock()
        let policy = settings.backoff
        let failures = queue.loadState().failures + 1
        var until = now.addingTimeInterval(policy.delay(failures: failures, spread: Double.random(in: -1...1)))
        if let retryAfter { until = max(until, min(retryAfter, now.addingTimeInterval(policy.cap))) }
        try await pool.run(.install, cancellable: false) { [until] in try queue.recordFailure(until: until) }
        outcome.failed.append(queue.url.absoluteString)
        let wait = Int(until.timeIntervalSince(now).rounded(.up))
        let message: Logger.Message = "reports: \(queue.url.absoluteString) not reached (\(reason)); \(queue.pending()) events stay queued, next attempt in \(wait) s"
        logger.log(level: needsPerson ? .warning : .notice, message)
    }
}
