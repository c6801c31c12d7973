import Foundation
import Hummingbird
import Logging
import OfflineAgent
import OfflineHTTP
import OfflinePublish
#if canImport(Glibc)
import Glibc
#endif

/// Answers the reference server's requests:
///
/// - `GET /manifest?app=NAME&current=VERSION` — the manifest, URLs `NAME/<file>`;
/// - `GET /NAME/manifest?current=VERSION` — the same, URLs `<file>`;
/// - `GET /NAME/<file>` — a published file (package, gzip, patch, static
///   `manifest.json` and `.sig`), with `Range`/`If-Range`;
/// - `GET /metrics` — Prometheus text (see `ReferenceServerMetrics`).
///
/// Both manifest forms resolve to the same file URLs, and files live where a static
/// host serving the publish directory would put them.
struct ReferenceServerResponder: HTTPResponder {
    typealias Context = BasicRequestContext

    let catalog: ReferenceServerCatalog
    let logger: Logger
    /// This server's counters, also served at `GET /metrics`.
    let metrics: ReferenceServerMetrics
    /// Seconds manifests and `.sig` files may be cached (see `ReferenceServer.Configuration`).
    var manifestMaxAge = 60
    /// The fleet report collector (`POST /report`, `GET /stats`); nil when reports are off.
    var reports: ReportCollector?
    let fileIO = FileIO()
    /// `X-Offline-Signature` (HTTPField itself is not re-exported by Hummingbird).
    static let signatureField = HTTPFields.Element.Name(ManifestSignature.header)!

    func respond(to request: Request, context: Context) async throws -> Response {
        let started = ContinuousClock.now
        let response: Response
        do {
            response = try await route(request, context: context)
        } catch let error where error is ServerError || error is PublishError || error is OfflineAgentError {
            // A broken state.json or unreadable file: the operator's problem, say so in the log.
            logger.error("\(request.method) \(request.uri): \(error)")
            response = Self.text(.internalServerError, "internal error\n")
        }
        let elapsed = ContinuousClock.now - started
        let micros = elapsed.components.seconds * 1_000_000 + elapsed.components.attoseconds / 1_000_000_000_000
        logger.info("\(request.method) \(request.uri) \(response.status.code) \(response.headers[.contentLength] ?? "-") \(micros)us")
        return counted(response, for: request)
    }

    private func route(_ request: Request, context: Context) async throws -> Response {
        if let response = await reportRoute(request) { return response }
        guard request.method == .get || request.method == .head else {
            var response = Self.text(.methodNotAllowed, "only GET and HEAD\n")
            response.headers[.allow] = "GET, HEAD"
            return response
        }
        // On the byte `/`: a slash inside a grapheme cluster still separates (`pathSegments`).
        let segments = request.uri.path.pathSegments.dropFirst()
        switch segments.count {
        case 1 where segments.first == "metrics":
            return metricsResponse(head: request.method == .head)
        case 1 where segments.first == "manifest":
            let query = request.uri.queryParameters
            // The agent appends its parameters after any the URL already has: the last one wins.
            guard let app = query[values: "app"].last.map(String.init) else {
                return Self.text(.badRequest, "missing query parameter 'app'\n")
            }
            return try manifest(request, app: app, route: .query)
        case 2 where segments.last == "manifest":
            let app = String(segments.first!)
            if let asked = request.uri.queryParameters[values: "app"].last, asked != app {
                return Self.text(.badRequest, "query parameter 'app' disagrees with the path\n")
            }
            return try manifest(request, app: app, route: .path)
        case 2:
            return try await file(request, app: String(segments.first!), name: String(segments.last!), context: context)
        default:
            return Self.text(.notFound, "not found\n")
        }
    }

    // MARK: Manifests

    private func manifest(_ request: Request, app: String, route: ManifestRoute) throws -> Response {
        guard AppName.isValid(app) else { return Self.text(.badRequest, "invalid app name\n") }
        var current: Version?
        if let text = request.uri.queryParameters[values: "current"].last, !text.isEmpty {
            guard let version = Version(String(text)) else { return Self.text(.badRequest, "invalid current version\n") }
            current = version
        }
        guard let entry = try catalog.entry(app: app) else { return Self.text(.notFound, "unknown app\n") }
        guard let rendered = entry.manifest(route: route, current: current) else {
            throw ServerError(.catalog, "no manifest for app '\(app)'")
        }
        var headers: HTTPFields = [.eTag: rendered.etag, .cacheControl: manifestCacheControl]
        if HTTPValidators.noneMatchHits(request.headers[.ifNoneMatch], etag: rendered.etag) {
            return Response(status: .notModified, headers: headers)
        }
        headers[.contentType] = "application/json"
        if let signature = rendered.signature { headers[Self.signatureField] = signature }
        return Self.body(rendered.body, headers: headers, head: request.method == .head)
    }

    // MARK: Files

    private func file(_ request: Request, app: String, name: String, context: Context) async throws -> Response {
        let contentType = app == TUFRepository.directoryName ? Self.contentType(ofMetadataFile: name) : Self.contentType(ofServableFile: name)
        guard AppName.isValid(app), let contentType else {
            return Self.text(.notFound, "not found\n")
        }
        let path = "\(catalog.directory)/\(app)/\(name)"
        var st = stat()
        guard stat(path, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { return Self.text(.notFound, "not found\n") }
        let size = Int64(st.st_size)
        let lastModified = HTTPValidators.httpDate(secondsSince1970: st.st_mtim.tv_sec)
        // Files the state describes are tagged by their SHA-256 (stable across hosts);
        // others by identity, size and time — published files are never rewritten in place.
        let etag = (try? catalog.entry(app: app))?.fileTags[name]
            ?? "\"\(String(st.st_ino, radix: 16))-\(String(size, radix: 16))-\(String(st.st_mtim.tv_sec, radix: 16))\""

        let fileHeaders: HTTPFields = [
            .eTag: etag, .lastModified: lastModified, .acceptRanges: "bytes", .contentType: contentType,
            .cacheControl: Self.isVersioned(name) ? Self.immutableCacheControl : manifestCacheControl,
        ]
        // 304, 416, 206 or 200, decided as `serve` decides it.
        let reply = HTTPFileReply(request.headers, size: size, etag: etag, lastModified: lastModified, modifiedSeconds: st.st_mtim.tv_sec)
        let headers = reply.headers(over: fileHeaders)
        if let text = reply.text { return Self.text(reply.status, text, headers: headers) }
        guard request.method != .head, let bytes = reply.bytes else { return Response(status: reply.status, headers: headers) }
        let body = try await fileIO.loadFile(path: path, range: Int(bytes.lowerBound)...Int(bytes.upperBound), context: context)
        return Response(status: reply.status, headers: headers, body: body)
    }

    /// The content type of a file name the server hands out, nil for anything else
    /// (`state.json`, staging leftovers, names that are not versions).
    static func contentType(ofServableFile name: String) -> String? {
        // A TUF target's hash-prefixed copy (`<sha256>.NAME`, docs/PROTOCOL.md "TUF repository").
        let parts = name.split(separator: ".", maxSplits: 1)
        if parts.count == 2, parts[0].count == 64, parts[0].allSatisfy({ $0.isHexDigit && !$0.isUppercase }) {
            return contentType(ofServableFile: String(parts[1]))
        }
        if name == Publisher.manifestFile || name == TUFRollout.fileName { return "application/json" }
        if name == Publisher.signatureFile { return "text/plain" }
        if name.hasSuffix(".zip.gz"), Version(String(name.dropLast(7))) != nil { return "application/gzip" }
        if name.hasSuffix(".zip"), Version(String(name.dropLast(4))) != nil { return "application/zip" }
        if name.hasSuffix(".bsdiff") {
            let versions = name.dropLast(7).split(separator: "-", omittingEmptySubsequences: false)
            if versions.count == 2, versions.allSatisfy({ Version(String($0)) != nil }) { return "application/octet-stream" }
        }
        return nil
    }

    /// The TUF metadata files of `<dir>/metadata/`: `timestamp.json` and the
    /// version-prefixed `N.root.json`, `N.snapshot.json`, `N.targets.json`.
    static func contentType(ofMetadataFile name: String) -> String? {
        if name == "timestamp.json" { return "application/json" }
        // `N.ROLE.json`: a top-level role, or an app's delegated role (`offline-publish delegate`).
        guard name.hasSuffix(".json"), let dot = name.firstIndex(of: ".") else { return nil }
        let number = name[..<dot], role = String(name[name.index(after: dot)...].dropLast(5))
        guard ["root", "snapshot", "targets"].contains(role) || AppName.isValid(role),
              let version = Int64(number), version > 0, String(version) == number else { return nil }
        return "application/json"
    }

    // MARK: Caching

    /// Changes with every publish: cached briefly, then revalidated by ETag.
    var manifestCacheControl: String { "public, max-age=\(manifestMaxAge)" }
    /// Named by their version(s) and never rewritten: any cache may keep them.
    static let immutableCacheControl = "public, max-age=31536000, immutable"

    /// Packages and patches, whose names fix their bytes (not `manifest.json`, `.sig`).
    static func isVersioned(_ name: String) -> Bool {
        if contentType(ofMetadataFile: name) != nil { return name != "timestamp.json" }
        return name != Publisher.manifestFile && name != Publisher.signatureFile && name != TUFRollout.fileName && contentType(ofServableFile: name) != nil
    }

    // MARK: Responses

    static func text(_ status: HTTPResponse.Status, _ text: String, headers: HTTPFields = [:]) -> Response {
        var headers = headers
        headers[.contentType] = "text/plain; charset=utf-8"
        // An error must not outlive its cause in a CDN (a 404 before the publish finished).
        headers[.cacheControl] = "no-store"
        return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(string: text)))
    }

    static func body(_ data: Data, headers: HTTPFields, head: Bool) -> Response {
        var headers = headers
        headers[.contentLength] = String(data.count)
        return Response(status: .ok, headers: headers, body: head ? ResponseBody() : ResponseBody(byteBuffer: ByteBuffer(bytes: data)))
    }
}
