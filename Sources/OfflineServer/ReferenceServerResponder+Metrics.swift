import Foundation
import Hummingbird
import OfflineHTTP

extension ReferenceServerResponder {
    /// Counts a finished response in `metrics` and, for a manifest or file body sent
    /// with `GET`, returns it with a body that counts its bytes as they are written.
    ///
    /// Classified by path the way `route` dispatches, after the fact, so the routes
    /// themselves carry no counting.
    func counted(_ response: Response, for request: Request) -> Response {
        let code = Int(response.status.code)
        if code >= 400 { metrics.recordError(code: code) }
        let segments = request.uri.path.pathSegments.dropFirst()
        let kind: ReferenceServerFileKind
        switch segments.count {
        case 1 where segments.first == "manifest", 2 where segments.last == "manifest":
            // A 400 or 404 here is not a manifest: it counts as an error only.
            guard code == 200 || code == 304, request.method == .get || request.method == .head else { return response }
            metrics.recordManifest(code: code)
            kind = .manifest
        case 2:
            guard request.method == .get || request.method == .head,
                  let fileKind = ReferenceServerFileKind(fileName: String(segments.last!)) else { return response }
            metrics.recordFile(fileKind, code: code)
            kind = fileKind
        default:
            return response
        }
        guard request.method == .get, code == 200 || code == 206 else { return response }
        var response = response
        let body = response.body, metrics = self.metrics
        response.body = ResponseBody(contentLength: body.contentLength) { writer in
            try await body.write(writer.map { buffer in
                metrics.recordSent(kind, bytes: buffer.readableBytes)
                return buffer
            })
        }
        return response
    }

    /// `GET /metrics`: this server's counters in the Prometheus text format.
    func metricsResponse(head: Bool) -> Response {
        let text = metrics.prometheusText() + (reports?.metrics.prometheusText() ?? "") + rolloutHaltedText()
        var response = Self.text(.ok, text)
        response.headers[.contentType] = "text/plain; version=0.0.4; charset=utf-8"
        response.headers[.cacheControl] = "no-store"
        response.headers[.contentLength] = String(text.utf8.count)
        if head { response.body = ResponseBody() }
        return response
    }

    /// `offline_server_rollout_halted{app,version}`: 1 for an app of the publish directory
    /// whose latest version's stage in force is 0 (halted, by `--auto-halt` or by hand),
    /// else 0; one series per app, for its latest version, read from the publish
    /// directory at each scrape so every instance serving it agrees.
    func rolloutHaltedText(now: Date = Date()) -> String {
        let apps = catalog.apps()
        guard !apps.isEmpty else { return "" }
        var lines = [
            "# HELP \(Self.rolloutHaltedName) 1 when the staged rollout of the app's latest version is halted (stage 0), else 0.",
            "# TYPE \(Self.rolloutHaltedName) gauge",
        ]
        for app in apps {
            guard let state = (try? catalog.entry(app: app))?.state else { continue }
            let halted = state.stageInForce(at: now) == 0 ? 1 : 0
            lines.append("\(Self.rolloutHaltedName){app=\"\(app)\",version=\"\(state.latest)\"} \(halted)")
        }
        return lines.joined(separator: "\n") + "\n"
    }

    static let rolloutHaltedName = "offline_server_rollout_halted"
}
