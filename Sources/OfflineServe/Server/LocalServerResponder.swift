import FoundationEssentials
import Hummingbird
import Logging
import NIOCore
import OfflineAgent
import OfflineHTTP

/// Answers every request of the loopback package server (see `LocalServer`): the one
/// place a `LocalRoute` (`LocalRouter`, where it is decided) becomes a response, and
/// where what it counts is counted.
struct LocalServerResponder: HTTPResponder {
    typealias Context = LocalRequestContext

    let router: LocalRouter
    var versions: LocalVersions { router.versions }
    var files: LocalFileCache { router.files }
    var lifecycle: LocalLifecycle { router.lifecycle }
    var mirrors: LocalMirrors { router.mirrors }
    let resolver: Resolver
    let metrics: LocalServerMetrics
    let logger: Logger
    /// Forwards what a mirrored origin does not serve offline (counted in `metrics`).
    let proxy: OriginProxy

    /// Files up to `keepLimit` are read whole once per version and kept (`LocalFileCache`,
    /// which bounds the total); larger ones stream in chunks of `chunkSize` from the open
    /// descriptor, and their ranges up to `wholeLimit` are read at once.
    static let chunkSize = 64 * 1024
    static let wholeLimit = 64 * 1024
    static let keepLimit = 2 << 20
    static let allocator = ByteBufferAllocator()

    func respond(to request: Request, context: Context) async throws -> Response {
        let peer = LocalHost.isLoopback(peer: context.page.remoteAddress)
        let response = await answer(router.route(request, peerIsLoopback: peer), to: request, page: context.page)
        logger.debug("\(request.method) \(request.uri) \(response.status.code)")
        return response
    }

    /// The response to `request`, which `router` sent to `route`, on the connection `page`.
    func answer(_ route: LocalRoute, to request: Request, page: any Channel) async -> Response {
        let head = request.method == .head
        switch route {
        case .refuse(let refusal):
            refusal.count(in: metrics)
            return LocalErrorAnswer(refusal).response(head: head)
        case .webSocket(_, let refusal):
            // A valid upgrade is relayed only as a connection's first request (`MirrorUpgradeFilter`).
            let refusal = refusal
                ?? LocalRefusal(status: .badRequest, text: "bad request: a WebSocket upgrade must be the first request of its connection\n")
            refusal.count(in: metrics)
            return LocalErrorAnswer(refusal).response(head: head)
        case .redirect(let location, let mirroredApp):
            var response = Self.redirect(.movedPermanently, to: location)
            if let mirroredApp {
                metrics.recordMirrorHit(app: mirroredApp)
                response.headers[Self.sourceHeader] = "package"
            }
            return response
        case .network(let pinned, let rest, let reason):
            return networkFallback(request, pinned: pinned, rest: rest, reason: reason)
        case .file(let pinned, let rest, let source):
            var response = file(request, pinned: pinned, rest: rest, head: head)
            guard source != .plain else { return response }
            metrics.recordMirrorHit(app: pinned.app)
            response.headers[Self.sourceHeader] = "package"
            if source == .entryPage, response.status == .ok || response.status == .notModified {
                response.headers[.cacheControl] = "no-cache"
            }
            return response
        case .forward(let origin, let snapshot, let fallback):
            if let fallback { metrics.recordFallback(app: fallback.app, reason: fallback.reason) }
            // A missing file is counted, but says nothing to the page: the origin answers as it would.
            let header = fallback.flatMap { $0.reason == .missingFile ? nil : $0.reason }
            let origins = snapshot.origins
            return await proxy.forward(
                request, to: origin, servePort: LocalHostAuthority(request.head.authority).port, fallback: header,
                page: page, isMirrored: { origins.contains($0) })
        case .control(.open(let launch)):
            return await open(request, launch: launch)
        case .control(.sessionRestore(let launch)):
            return await restoreSession(request, head: head, launch: launch)
        case .control(.sessionItem):
            // A restored history entry: the same redirect as /open (not a new launch).
            return await open(request, launch: false)
        case .control(.metrics):
            let text = ByteBuffer(string: metrics.prometheusText())
            let headers: HTTPFields = [
                .contentType: "text/plain; version=0.0.4; charset=utf-8", .contentLength: String(text.readableBytes), .cacheControl: "no-store",
            ]
            return Response(status: .ok, headers: headers, body: head ? ResponseBody() : ResponseBody(byteBuffer: text))
        case .control(.index):
            return LocalErrorAnswer(
                .notFound, .text("offline-agent: GET /<app>/<path>, /open?url=URL, /session/restore?history=JSON, /session/item?url=URL, /metrics")
            ).response(head: head)
        case .control(.mark(let mark, let app, let version)):
            return await self.mark(mark, app: app, version: version, request: request)
        }
    }

    /// A request for a version the kill switch turns off: 302 to the URL it stands for
    /// (the app's first http or https whitelist prefix, the rest of the path and the
    /// query), or 404 when the whitelist names none.
    private func networkFallback(_ request: Request, pinned: LocalPin, rest: String, reason: FallbackReason) -> Response {
        metrics.recordFallback(app: pinned.app, reason: reason)
        guard let location = LocalNetworkFallback.location(whitelist: pinned.whitelist, rest: rest, query: request.uri.query) else {
            metrics.recordFile(app: pinned.app, code: 404)
            return LocalErrorAnswer(.notFound, .text("not served offline (\(reason.rawValue))"), fields: [Self.fallbackHeader: reason.rawValue])
                .response(head: request.method == .head)
        }
        metrics.recordFile(app: pinned.app, code: 302)
        var response = Self.redirect(.found, to: location)
        response.headers[Self.fallbackHeader] = reason.rawValue
        return response
    }

    // MARK: /open

    /// Redirects to the local copy of `url` when it is served offline, else to `url` itself.
    /// A `launch` counts one launch of a trial version (and may roll it back first).
    private func open(_ request: Request, launch: Bool) async -> Response {
        guard let raw = request.uri.queryParameters[values: "url"].last, !raw.isEmpty else {
            return LocalErrorAnswer(.badRequest, .text("missing query parameter 'url' (the percent-encoded URL to open)")).response()
        }
        guard let url = URL(string: String(raw)), WebAddress.isAbsolute(url) else {
            return LocalErrorAnswer(.badRequest, .text("'url' must be an absolute http or https URL")).response()
        }
        var resolution = resolver.resolve(url)
        if launch, await lifecycle.countLaunch(resolution, logger: logger) { resolution = resolver.resolve(url) }
        metrics.recordOpen(resolution)
        // A mirrored origin keeps its own local origin whatever the kill switch says: the
        // page's storage stays put, and the mirror forwards what it does not serve.
        if let origin = MirrorOrigin(url: url), mirrors.snapshot().origins.contains(origin),
           let location = origin.mirrorURL(for: url, servePort: LocalHostAuthority(request.head.authority).port) {
            return Self.redirect(.found, to: location)
        }
        switch resolution {
        case .file(let file):
            // Query and fragment don't select the file, but the page may read them.
            var location = "/\(file.app)/\(file.relativePath)"
            let components = URLComponents(url: url, resolvingAgainstBaseURL: false)
            if let query = components?.percentEncodedQuery { location += "?\(query)" }
            if let fragment = components?.percentEncodedFragment { location += "#\(fragment)" }
            return Self.redirect(.found, to: location)
        case .network:
            return Self.redirect(.found, to: url.absoluteString)
        }
    }

    // MARK: Files

    /// A file of `pinned`, a version the kill switch lets through.
    func file(_ request: Request, pinned: LocalPin, rest: String, head: Bool) -> Response {
        // `LocalRouter` found the file; the cache may have dropped it since.
        guard let entry = files.resolve(rest, in: pinned.directory) else {
            metrics.recordFile(app: pinned.app, code: 404)
            return LocalErrorAnswer(.notFound, .text("not found")).response(head: head)
        }
        switch load(entry, pinned: pinned, rest: rest, head: head) {
        case .ready(let source, let validators):
            // 304, 416, 206 or 200 (`HTTPFileReply`), counted.
            let reply = HTTPFileReply(
                request.headers, size: validators.size, etag: validators.etag, lastModified: validators.lastModified,
                modifiedSeconds: validators.modified)
            metrics.recordFile(app: pinned.app, code: Int(reply.status.code))
            let headers = reply.headers(over: Self.fileHeaders(pinned: pinned, contentType: entry.contentType, validators: validators))
            if let text = reply.text, !head {
                return Response(status: reply.status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(string: text)))
            }
            guard !head, let bytes = reply.bytes else { return Response(status: reply.status, headers: headers) }
            return send(bytes, of: source, path: entry.path, pinned: pinned, status: reply.status, headers: headers)
        case .failed(let response):
            return response
        }
    }

    /// The headers of every response with the file `validators` describe (`file`).
    static func fileHeaders(pinned: LocalPin, contentType: String, validators: LocalFileCache.Validators) -> HTTPFields {
        var headers: HTTPFields = [
            .contentType: contentType,
            .eTag: validators.etag,
            .lastModified: validators.lastModified,
            .acceptRanges: "bytes",
            // Revalidate every time: the next load after a swap must see the new version.
            .cacheControl: "no-cache",
        ]
        headers[Self.versionHeader] = pinned.versionText
        // The same version where a page's script reads its own document's headers without
        // asking again (`performance.getEntriesByType("navigation")[0].serverTiming`): asked
        // again, it could be a version a sync swapped in since (docs/HOST-APPS.md).
        headers[Self.serverTiming] = "offline-agent-version;desc=\"\(pinned.versionText)\""
        return headers
    }

    /// Where the bytes of the file at `path` come from: kept contents read under this very
    /// record, or a descriptor opened once now (small files are then read whole and kept).
    private func load(_ entry: LocalFileCache.Entry, pinned: LocalPin, rest: String, head: Bool) -> Loaded {
        let path = entry.path
        if let content = files.content(rest, in: pinned.directory, record: pinned.recordIdentity) {
            return .ready(.memory(content.body), content.validators)
        }
        guard let file = LocalOpenFile(path: path) else {
            files.forget(rest, in: pinned.directory)
            metrics.recordFile(app: pinned.app, code: 404)
            return .failed(LocalErrorAnswer(.notFound, .text("not found")).response(head: head))
        }
        let validators = files.validators(
            rest, in: pinned.directory, file: file, version: pinned.versionText, recordModified: pinned.recordModified)
        guard file.size <= Self.keepLimit else { return .ready(.open(file), validators) }
        do {
            let body = try file.read(offset: 0, count: Int(file.size), allocator: Self.allocator)
            files.keep(.init(record: pinned.recordIdentity, body: body, validators: validators), for: rest, in: pinned.directory)
            return .ready(.memory(body), validators)
        } catch {
            logger.error("reading \(path): \(error)")
            return .failed(LocalErrorAnswer(.internalServerError, .text("cannot read file")).response())
        }
    }

    /// The response carrying `bytes` of the file: kept bytes in one write, a medium file
    /// read whole, a large one streamed in chunks while `pinned` holds its version.
    private func send(
        _ bytes: ClosedRange<Int64>, of source: Source, path: String, pinned: LocalPin, status: HTTPResponse.Status,
        headers: HTTPFields
    ) -> Response {
        let count = Int(bytes.upperBound - bytes.lowerBound + 1)
        let file: LocalOpenFile
        switch source {
        case .memory(let buffer):
            // Small files (most of a web app): one write with the headers.
            return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: Self.slice(bytes, of: buffer)))
        case .open(let open):
            file = open
        }
        if count <= Self.wholeLimit {
            do {
                let buffer = try file.read(offset: bytes.lowerBound, count: count, allocator: Self.allocator)
                return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: buffer))
            } catch {
                logger.error("reading \(path): \(error)")
                return LocalErrorAnswer(.internalServerError, .text("cannot read file")).response()
            }
        }
        let body = ResponseBody(contentLength: count) { writer in
            // `pinned` keeps the version's directory from collection and `file` keeps the
            // descriptor open until the last byte is written (or the client goes away).
            withExtendedLifetime(pinned) {}
            var offset = bytes.lowerBound
            var remaining = count
            // Two buffers in turn: by the time one is refilled the channel has usually
            // written and released it, so its storage is reused instead of reallocated.
            var buffers = [Self.allocator.buffer(capacity: Self.chunkSize), Self.allocator.buffer(capacity: Self.chunkSize)]
            var turn = 0
            while remaining > 0 {
                let length = min(remaining, Self.chunkSize)
                buffers[turn].clear()
                try file.read(offset: offset, count: length, into: &buffers[turn])
                try await writer.write(buffers[turn])
                offset += Int64(length)
                remaining -= length
                turn ^= 1
            }
            try await writer.finish(nil)
        }
        return Response(status: status, headers: headers, body: body)
    }

    /// `bytes` of a file kept whole in `buffer`, without a copy.
    static func slice(_ bytes: ClosedRange<Int64>, of buffer: ByteBuffer) -> ByteBuffer {
        let count = Int(bytes.upperBound - bytes.lowerBound + 1)
        return count == buffer.readableBytes ? buffer : buffer.getSlice(at: buffer.readerIndex + Int(bytes.lowerBound), length: count)!
    }

    static let versionHeader = HTTPFields.Element.Name("X-Offline-Version")!
    static let serverTiming = HTTPFields.Element.Name("Server-Timing")!
    /// On a response the kill switch sent to the network: why (a `FallbackReason`).
    static let fallbackHeader = HTTPFields.Element.Name("X-Offline-Fallback")!
    /// Which responses say where they came from: `package` or `origin`.
    static let sourceHeader = HTTPFields.Element.Name("X-Offline-Source")!

    /// A file's source and validators, or the response that says why there is none.
    private enum Loaded {
        case ready(Source, LocalFileCache.Validators)
        case failed(Response)
    }

    /// Where a response's bytes come from.
    private enum Source {
        case memory(ByteBuffer)
        case open(LocalOpenFile)
    }

    // MARK: Responses

    static func redirect(_ status: HTTPResponse.Status, to location: String) -> Response {
        Response(status: status, headers: [.location: location, .cacheControl: "no-store", .contentLength: "0"])
    }
}
