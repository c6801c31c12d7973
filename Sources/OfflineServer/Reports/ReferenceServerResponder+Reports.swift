import Foundation
import Hummingbird
import OfflineAgent
import NIOCore

extension ReferenceServerResponder {
    /// `POST /report`, `GET /stats?app=NAME` and `GET /dashboard` (docs/PROTOCOL.md,
    /// "Collector (offline-server)"); nil for any other path. `404` for all three when
    /// reports are off.
    func reportRoute(_ request: Request) async -> Response? {
        let path = request.uri.path
        guard path == "/report" || path == "/stats" || path == "/dashboard" else { return nil }
        guard let reports else { return Self.text(.notFound, "fleet reports are off\n") }
        if path == "/report" {
            guard request.method == .post else { return Self.methodNotAllowed("POST") }
            return await report(request, reports)
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
            for app in apps {
                // The figures and the chart are separate reads: both at once, on two connections.
                async let stats = reports.stats(app: app, now: now)
                async let adoption = reports.store.adoption(app: app)
                page.apps.append(.init(stats: try await stats, adoption: try await adoption))
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
        if let reportToken, !Self.bearerMatches(request.headers[.authorization], token: reportToken) {
            var response = Self.text(.unauthorized, "a report needs the collector's bearer token\n")
            response.headers[.wwwAuthenticate] = "Bearer realm=\"offline-server\""
            return response
        }
        let cap = ReportBatch.maxBodyBytes
        if let length = request.headers[.contentLength].flatMap({ Int($0) }), length > cap {
            return Self.text(.contentTooLarge, "body over \(cap) bytes\n")
        }
        var body = ByteBuffer()
        do {
            for try await part in request.body {
                // Stop reading at the cap: a chunked body has no length to refuse up front.
                guard body.readableBytes + part.readableBytes <= cap else {
                    return Self.text(.contentTooLarge, "body over \(cap) bytes\n")
                }
                body.writeImmutableBuffer(part)
            }
        } catch {
            return Self.text(.badRequest, "body could not be read\n")
        }
        do {
            let receipt = try await reports.ingest(body.readableBytesView)
            return Self.json(receipt)
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

    /// `Authorization: Bearer TOKEN` with exactly `token`, compared in time independent of
    /// where they differ, so the answer's timing does not reveal a prefix of the token.
    static func bearerMatches(_ header: String?, token: String) -> Bool {
        guard let header, header.count > 7, header.prefix(7).lowercased() == "bearer " else { return false }
        let given = Array(header.dropFirst(7).trimmingCharacters(in: .whitespaces).utf8), wanted = Array(token.utf8)
        var difference = UInt8(given.count == wanted.count ? 0 : 1)
        for index in 0..<wanted.count { difference |= wanted[index] ^ (index < given.count ? given[index] : 0) }
        return difference == 0
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
