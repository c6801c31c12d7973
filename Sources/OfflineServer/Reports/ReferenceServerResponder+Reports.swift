import Foundation
import Hummingbird
import OfflineAgent
import OfflinePublish
import NIOCore

extension ReferenceServerResponder {
    /// `POST /report`, `POST /enrol`, `GET /stats?app=NAME` and `GET /dashboard`
    /// (docs/PROTOCOL.md, "Collector (offline-server)"); nil for any other path. `404`
    /// for all of them when reports are off.
    func reportRoute(_ request: Request) async -> Response? {
        let path = request.uri.path
        guard path == "/report" || path == "/enrol" || path == "/stats" || path == "/dashboard" else { return nil }
        guard let reports else { return Self.text(.notFound, "fleet reports are off\n") }
        if path == "/report" || path == "/enrol" {
            guard request.method == .post else { return Self.methodNotAllowed("POST") }
            // JSON only: an HTML form or a beacon of another site's page (text/plain,
            // form-encoded) cannot send it without a CORS preflight, which is never granted.
            guard Self.isJSON(request.headers[.contentType]) else {
                return Self.text(.unsupportedMediaType, "\(path) takes Content-Type: application/json only\n")
            }
            return path == "/report" ? await report(request, reports) : await enrol(request, reports)
        }
        guard request.method == .get || request.method == .head else { return Self.methodNotAllowed("GET, HEAD") }
        return path == "/stats" ? await stats(request, reports) : await dashboard(request, reports)
    }

    /// `GET /dashboard` (every app of the publish directory) or `/dashboard?app=NAME`.
    private func dashboard(_ request: Request, _ reports: ReportCollector) async -> Response {
        let apps: [String]
        if let app = request.uri.queryParameters[values: "app"].last.map(String.init) {
            guard AppName.isValid(app) else { return Self.text(.badRequest, "invalid app name\n") }
            apps = [app]
        } else {
            apps = catalog.apps()
        }
        do {
            let now = Date()
            var page = DashboardPage(apps: [], generated: now)
            page.metadataWarnings = MetadataExpiryWarning.all(publishDirectory: catalog.directory, now: now, expiry: catalog.metadataExpiry)
            for app in apps {
                // The chart draws the versions the table lists (a bounded number), so it reads their moves only.
                let stats = try await reports.stats(app: app, now: now)
                let adoption = try await reports.store.adoption(app: app, versions: stats.versions.map(\.version))
                page.apps.append(.init(stats: stats, adoption: adoption))
            }
            let headers: HTTPFields = [
                .contentType: "text/html; charset=utf-8", .cacheControl: "no-store",
                .contentSecurityPolicy: DashboardPage.contentSecurityPolicy,
            ]
            return Self.body(Data(page.render().utf8), headers: headers, head: request.method == .head)
        } catch {
            logger.error("GET /dashboard: \(error)")
            var response = Self.text(.serviceUnavailable, "the dashboard cannot be read now\n")
            response.headers[.retryAfter] = "30"
            return response
        }
    }

    private func report(_ request: Request, _ reports: ReportCollector) async -> Response {
        let sender: ReportAccess.Sender
        switch reports.access.sender(authorization: request.headers[.authorization]) {
        case .success(let proven): sender = proven
        case .failure(let refusal):
            var response = Self.text(.unauthorized, refusal.reason + "\n")
            response.headers[.wwwAuthenticate] = reports.access.challenge
            return response
        }
        // Per device, before the body is read: a flooding device costs a header's check.
        if case .device(let device) = sender, let wait = reports.deviceLimiter?.take(device) {
            var response = Self.text(.tooManyRequests, "too many reports from this device: retry after \(wait) s\n")
            response.headers[.retryAfter] = String(wait)
            return response
        }
        let body: ByteBuffer
        switch await Self.readBody(request, cap: ReportBatch.maxBodyBytes) {
        case .success(let read): body = read
        case .failure(let refusal): return refusal.response
        }
        do {
            let receipt = try await reports.ingest(body.readableBytesView, from: sender)
            return Self.json(receipt)
        } catch let throttled as ReportCollector.Throttled {
            return Self.throttled(throttled, "too many reports for a device this batch names")
        } catch let refusal as ReportRefusal {
            return Self.text(refusal.tooLarge ? .contentTooLarge : .badRequest, refusal.reason + "\n")
        } catch {
            // The database failed (disk full, locked too long): nothing was stored, the agent keeps
            // the batch and sends it again later.
            logger.error("POST /report: storing failed: \(error)")
            var response = Self.text(.serviceUnavailable, "reports cannot be stored now\n")
            response.headers[.retryAfter] = "30"
            return response
        }
    }

    private func stats(_ request: Request, _ reports: ReportCollector) async -> Response {
        guard let app = request.uri.queryParameters[values: "app"].last.map(String.init) else {
            return Self.text(.badRequest, "missing query parameter 'app'\n")
        }
        guard AppName.isValid(app) else { return Self.text(.badRequest, "invalid app name\n") }
        do {
            var response = Self.json(try await reports.stats(app: app))
            if request.method == .head { response.body = ResponseBody() }
            return response
        } catch {
            logger.error("GET /stats: \(error)")
            var response = Self.text(.serviceUnavailable, "stats cannot be read now\n")
            response.headers[.retryAfter] = "30"
            return response
        }
    }

    /// `POST /enrol`: `{"device":"ID"}` with the fleet's bearer token answers the device's
    /// own credential, `{"credential":"HEX","device":"ID"}`, once per id: `409` for an id
    /// enrolled already (until `offline-server reenrol`), so holding the fleet token no
    /// longer gets another device's credential; `404` when this collector enrols nobody
    /// (no fleet token).
    private func enrol(_ request: Request, _ reports: ReportCollector) async -> Response {
        guard let secret = reports.access.secret, let fleetToken = reports.access.fleetToken else {
            return Self.text(.notFound, "this collector enrols no devices: it has no fleet token\n")
        }
        guard ReportAccess.bearerMatches(request.headers[.authorization], token: fleetToken) else {
            var response = Self.text(.unauthorized, "enrolment needs the collector's bearer token\n")
            response.headers[.wwwAuthenticate] = "Bearer realm=\"offline-server\""
            return response
        }
        let body: ByteBuffer
        switch await Self.readBody(request, cap: 4096) {
        case .success(let read): body = read
        case .failure(let refusal): return refusal.response
        }
        struct Asked: Decodable { var device: String }
        guard let asked = try? JSONDecoder().decode(Asked.self, from: Data(body.readableBytesView)) else {
            return Self.text(.badRequest, "body must be {\"device\":\"ID\"}\n")
        }
        guard ReportCredential.isValidDevice(asked.device) else {
            return Self.text(.badRequest, "device must be \(ReportCredential.deviceRule)\n")
        }
        do {
            guard try await reports.enrol(device: asked.device, secret: secret) else {
                return Self.text(.conflict, """
                    device \(asked.device) is enrolled already: its credential is given once; \
                    if the device was reset or replaced, run offline-server reenrol --device \(asked.device) --database DB
                    """ + "\n")
            }
        } catch let throttled as ReportCollector.Throttled {
            return Self.throttled(throttled, "too many enrolments for this device")
        } catch {
            logger.error("POST /enrol: \(error)")
            var response = Self.text(.serviceUnavailable, "enrolments cannot be recorded now\n")
            response.headers[.retryAfter] = "30"
            return response
        }
        return Self.json(ReportCredential(device: asked.device, credential: secret.credential(device: asked.device)))
    }

    /// `429` with `Retry-After`.
    private static func throttled(_ throttled: ReportCollector.Throttled, _ reason: String) -> Response {
        var response = text(.tooManyRequests, "\(reason): retry after \(throttled.wait) s\n")
        response.headers[.retryAfter] = String(throttled.wait)
        return response
    }

    /// A refused body: `413` over the cap, `400` when it cannot be read.
    private struct BodyRefusal: Error {
        var response: Response
    }

    /// The whole body, refused past `cap` bytes; reading stops at the cap, as a chunked
    /// body has no length to refuse up front.
    private static func readBody(_ request: Request, cap: Int) async -> Result<ByteBuffer, BodyRefusal> {
        if let length = request.headers[.contentLength].flatMap({ Int($0) }), length > cap {
            return .failure(.init(response: text(.contentTooLarge, "body over \(cap) bytes\n")))
        }
        var body = ByteBuffer()
        do {
            for try await part in request.body {
                guard body.readableBytes + part.readableBytes <= cap else {
                    return .failure(.init(response: text(.contentTooLarge, "body over \(cap) bytes\n")))
                }
                body.writeImmutableBuffer(part)
            }
        } catch {
            return .failure(.init(response: text(.badRequest, "body could not be read\n")))
        }
        return .success(body)
    }

    /// Whether a `Content-Type` is `application/json` (parameters such as `charset` aside).
    static func isJSON(_ contentType: String?) -> Bool {
        guard let contentType else { return false }
        let type = contentType.split(separator: ";", maxSplits: 1).first.map(String.init) ?? ""
        return type.trimmingCharacters(in: .whitespaces).lowercased() == "application/json"
    }

    private static func methodNotAllowed(_ allowed: String) -> Response {
        var response = text(.methodNotAllowed, "only \(allowed)\n")
        response.headers[.allow] = allowed
        return response
    }

    /// A JSON body (keys sorted, so equal counts read the same), never cached.
    private static func json(_ value: some Encodable) -> Response {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let data = (try? encoder.encode(value)) ?? Data("{}".utf8)
        return body(data + Data("\n".utf8), headers: [.contentType: "application/json", .cacheControl: "no-store"], head: false)
    }
}
