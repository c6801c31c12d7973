import HTTPTypes
import Hummingbird
import NIOCore
import NIOHTTP1
import NIOHTTPTypesHTTP1
import OfflineAgent

/// Requests answered on the connection's event loop (`LocalImmediateResponder`): a page's
/// files, once warm, and the requests a mirror forwards need no task, no hop to Swift's
/// cooperative pool and back, and no wait, so they are answered where they were read.
extension LocalServerResponder {
    /// A response whose body, if it has one, is already in memory; its head in HTTP/1
    /// form, as the page's encoder takes it (`LocalImmediateResponder` writes it below the
    /// HTTPTypes codec).
    struct ImmediateResponse {
        var head: HTTPResponseHead
        var body: ByteBuffer?
    }

    /// What the event loop does with a request (`LocalImmediateResponder`).
    enum ImmediateAnswer {
        /// Answered from memory.
        case response(ImmediateResponse)
        /// Forwarded to the origin of its mirror host (`OriginExchange`); the kill switch's
        /// reason when it is what sent the request there.
        case forward(MirrorOrigin, LocalMirrors.Snapshot, FallbackReason?)
    }

    /// What the event loop does with `request`, when it needs nothing but memory and the
    /// checks below:
    ///
    /// - a GET or HEAD of a package file, on the plain host (`/<app>/<rest>`) or a mirror
    ///   host, of a version the kill switch lets through, whose pin
    ///   (`LocalVersions.keptPin`) and bytes (`LocalFileCache.kept`) an earlier request
    ///   left, is answered: counted as `respond` counts it, with the same response,
    ///   headers and bytes, that `respond` makes;
    /// - a request on a mirror host that `mirror` would forward, decided from the mirrors'
    ///   snapshot and the kept pin alone (any method but GET and HEAD; a path no whitelist
    ///   selects; the kill switch), is forwarded, counted as `mirror` counts it.
    ///
    /// Nil, with nothing counted, for every other request: `respond` answers those (and
    /// warms the caches). `authority` is the request's `Host` value, parsed.
    ///
    /// Costs one `poll` of the store's watch (`LocalStoreWatch`) while the
    /// store is unchanged, so a swap is still seen at once; the pin's and the lifecycle
    /// record's checks (a `readlink` and `stat`s) only after a change, or on every request
    /// where inotify is unavailable. Never waits for a lock held across a filesystem call.
    func immediateAnswer(to request: Request, authority: LocalHostAuthority) -> ImmediateAnswer? {
        let path = request.uri.path
        // One look at the store's watch for the whole request (`LocalStoreWatch`).
        let generation = versions.watch.generation()
        let route = immediateRoute(
            path, isFileRequest: request.method == .get || request.method == .head, upgrade: request.headers[.upgrade] != nil,
            host: hostName(request, generation: generation, authority: authority), generation: generation)
        switch route {
        case nil:
            return nil
        case .forward(let origin, let snapshot, let fallback)?:
            if let fallback { metrics.recordFallback(app: fallback.app, reason: fallback.reason) }
            return .forward(origin, snapshot, fallback?.reason)
        case .file(let app, let rest, let pinned, let mirrored)?:
            guard var response = keptFile(app: app, rest: rest, request: request, pinned: pinned, generation: generation) else { return nil }
            if mirrored {
                metrics.recordMirrorHit(app: app)
                response.head.headers.add(name: Self.sourceHeader.rawName, value: "package")
            }
            metrics.recordImmediateResponse()
            logger.debug("\(request.method) \(request.uri) \(response.head.status.code)")
            return .response(response)
        }
    }

    /// Where the event loop may take a request (`immediateAnswer`, `keptWholeFile`), from
    /// its path, its method's kind, whether it asks for an upgrade and its `Host`, before
    /// any file is looked up; nil for a request only `respond` answers. Counts nothing: the
    /// caller counts what it does.
    enum ImmediateRoute {
        /// `rest` of `app`'s pinned version (`pinned`, when a mirror's whitelist needed it
        /// already); `mirrored`: asked on a mirror host.
        case file(app: String, rest: String, pinned: LocalPin?, mirrored: Bool)
        /// To the origin of the mirror host; the kill switch's app and reason when it is
        /// what sends the request there.
        case forward(MirrorOrigin, LocalMirrors.Snapshot, fallback: (app: String, reason: FallbackReason)?)
    }

    func immediateRoute(_ path: String, isFileRequest: Bool, upgrade: Bool, host: HostName, generation: UInt64) -> ImmediateRoute? {
        guard !path.hasPrefix(LocalLifecycle.routePrefix) else { return nil }
        switch host {
        case .plain:
            guard isFileRequest, Self.controlRoute(path) == nil, case (let app, let rest?) = Self.appPath(path), AppName.isValid(app)
            else { return nil }
            return .file(app: app, rest: rest, pinned: nil, mirrored: false)
        case .mirror(let origin, let snapshot):
            // Upgrades go to `respond`, which refuses the invalid ones `mirror` sees.
            guard !upgrade else { return nil }
            guard isFileRequest, let app = snapshot.app(origin: origin, path: path) else { return .forward(origin, snapshot, fallback: nil) }
            guard let pinned = versions.keptPin(app, generation: generation) else { return nil }
            guard let rest = Self.rest(of: path, on: origin, in: pinned) else { return .forward(origin, snapshot, fallback: nil) }
            if let reason = pinned.fallback ?? (lifecycle.isBad(app, pinned.version, generation: generation) ? .badVersion : nil) {
                return .forward(origin, snapshot, fallback: (app, reason))
            }
            return .file(app: app, rest: rest, pinned: pinned, mirrored: true)
        case .twoHosts, .unmirrored, .notLoopback:
            return nil
        }
    }

    /// A whole-file `200` for a plain `GET` (`keptWholeFile`): the kept bytes, what it
    /// counts, and the store generation it may be given again for (`LocalWholeFileMemo`).
    struct WholeFileAnswer {
        let content: LocalFileCache.Content
        /// Asked on a mirror host: the response carries `X-Offline-Source: package`.
        let mirrored: Bool
        let series: LocalServerMetrics.WholeFileSeries
        /// The watch generation every check behind the answer held for (the pin, the
        /// lifecycle record and, on a mirror host, the mirrors' snapshot); nil when one of
        /// them is made on every request, or a change came while it was made.
        let heldFor: UInt64?
    }

    /// The kept bytes of a whole-file `GET` routed to a file (`immediateRoute`, for a request
    /// with one `Host` line and nothing else that `immediateAnswer` reads: no `Upgrade`, no
    /// field `asksForWholeFile` looks for), when `immediateAnswer` would answer it from them.
    /// `generation`: the watch's, read first for the request. Counts nothing: the caller
    /// counts what it sends (`count`). `LocalRawResponder` answers such requests before
    /// any HTTP decoding.
    func keptWholeFile(_ route: ImmediateRoute?, generation: UInt64) -> WholeFileAnswer? {
        guard case .file(let app, let rest, let pinned, let mirrored)? = route,
              let (pin, _, content) = keptContent(app: app, rest: rest, pinned: pinned, generation: generation), content.validators.size > 0
        else { return nil }
        let held = versions.holds(app, pin, at: generation) && lifecycle.holds(app, at: generation)
            && (!mirrored || mirrors.holds(at: generation))
        return WholeFileAnswer(
            content: content, mirrored: mirrored, series: metrics.wholeFileSeries(app: app, mirrored: mirrored), heldFor: held ? generation : nil)
    }

    /// Counts `answer`, sent for a `GET` of `path`, as `immediateAnswer` counts a response;
    /// `repeated`: given again from a loop's memo.
    func count(_ answer: WholeFileAnswer, path: String, repeated: Bool) {
        metrics.record(answer.series, repeated: repeated)
        logger.debug("GET \(path) 200")
    }

    /// The kept entry and bytes of `rest` in `app`'s pinned version, while no kill switch or
    /// bad mark sends it elsewhere.
    private func keptContent(
        app: String, rest: String, pinned: LocalPin?, generation: UInt64
    ) -> (pinned: LocalPin, entry: LocalFileCache.Entry, content: LocalFileCache.Content)? {
        guard let pinned = pinned ?? versions.keptPin(app, generation: generation), pinned.fallback == nil,
              !lifecycle.isBad(app, pinned.version, generation: generation),
              let (entry, content) = files.kept(rest, in: pinned.directory, record: pinned.recordIdentity)
        else { return nil }
        return (pinned, entry, content)
    }

    /// The response with `rest` of `app`'s pinned version, from kept bytes only.
    private func keptFile(app: String, rest: String, request: Request, pinned: LocalPin?, generation: UInt64) -> ImmediateResponse? {
        guard let (pinned, entry, content) = keptContent(app: app, rest: rest, pinned: pinned, generation: generation) else { return nil }
        let head = request.method == .head
        // A GET of a whole file without conditions, what a page load sends: the head made
        // when the bytes were kept, as `reply` makes it.
        if !head, content.validators.size > 0, Self.asksForWholeFile(request) {
            metrics.recordFile(app: app, code: 200)
            return ImmediateResponse(head: HTTPResponseHead(version: .http1_1, status: .ok, headers: content.wholeHeaders), body: content.body)
        }
        switch reply(request, pinned: pinned, contentType: entry.contentType, validators: content.validators, head: head) {
        case .complete(let response, let body):
            return ImmediateResponse(head: HTTPResponseHead(response.head), body: body)
        case .bytes(let status, let headers, let bytes):
            return ImmediateResponse(
                head: HTTPResponseHead(HTTPResponse(status: status, headerFields: headers)), body: Self.slice(bytes, of: content.body))
        }
    }
}
