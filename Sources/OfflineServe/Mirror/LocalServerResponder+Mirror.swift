import FoundationEssentials
import Hummingbird
import OfflineAgent
import OfflineHTTP

/// Mirrored origins (`docs/PROTOCOL.md`, "Mirrored origins"): each origin an active
/// whitelist names is answered on its own loopback host (`MirrorOrigin`), with the
/// origin's own paths: whitelisted files from the package, everything else forwarded.
extension LocalServerResponder {
    /// Where a request goes by its `Host`.
    enum HostRoute {
        /// The plain loopback host: `/<app>/…` and the control routes.
        case plain
        /// The mirror host of a mirrored origin.
        case mirror(MirrorOrigin, LocalMirrors.Snapshot)
        /// Refused before any route (400, 403).
        case refused(Response)
    }

    /// Which responses say where they came from: `package` or `origin`.
    static let sourceHeader = HTTPFields.Element.Name("X-Offline-Source")!

    /// What a request's `Host` names, before anything is answered or counted.
    enum HostName {
        /// A loopback name (any name, with `--allow-remote`): the plain host.
        case plain
        /// The mirror host of a mirrored origin.
        case mirror(MirrorOrigin, LocalMirrors.Snapshot)
        /// More than one `Host` line.
        case twoHosts
        /// A name under `.localhost` that mirrors no origin an active whitelist names.
        case unmirrored(Substring)
        /// Any other name, while `checkHost` is on.
        case notLoopback
    }

    /// Sorts a request by its `Host`: two `Host` lines; a `*.localhost` name, the mirror
    /// of a mirrored origin or not (whatever `checkHost` says: the server never fronts an
    /// origin no whitelist names); a loopback name, or any with the check off. `authority`
    /// is the request's `Host` value parsed, when the caller has it.
    func hostName(_ request: Request, generation: UInt64? = nil, authority: LocalHostAuthority? = nil) -> HostName {
        // RFC 9112 §3.2: more than one Host line is a bad request. The first one became
        // `authority`; any left among the fields is a second one, maybe naming another host.
        if request.headers.contains(Self.hostField) { return .twoHosts }
        return hostName(LocalHostAuthority.of(request.head.authority, known: authority), generation: generation)
    }

    /// `hostName(_:generation:authority:)` for a request with one `Host` line, `authority`.
    func hostName(_ authority: LocalHostAuthority, generation: UInt64?) -> HostName {
        if let name = authority.mirrorName, let host = authority.host {
            // A mirror host names its origin in one spelling only (`MirrorOrigin(mirrorHost:)`),
            // so the snapshot's table of those spellings answers without parsing the name.
            let snapshot = mirrors.snapshot(generation: generation)
            if let origin = snapshot.byMirrorHost[name] { return .mirror(origin, snapshot) }
            return .unmirrored(host)
        }
        if checkHost, !authority.isLoopback { return .notLoopback }
        return .plain
    }

    /// Where a request goes by its `Host` (`hostName`): two `Host` lines → 400, a name
    /// under `.localhost` that mirrors nothing or a non-loopback name → 403.
    func hostRoute(_ request: Request) -> HostRoute {
        switch hostName(request) {
        case .plain:
            return .plain
        case .mirror(let origin, let snapshot):
            return .mirror(origin, snapshot)
        case .twoHosts:
            return .refused(Self.text(.badRequest, "bad request: more than one Host header\n"))
        case .unmirrored(let host):
            metrics.recordForbiddenHost()
            return .refused(Self.text(.forbidden, "forbidden: \(host) is not the mirror of a whitelisted origin\n"))
        case .notLoopback:
            metrics.recordForbiddenHost()
            return .refused(Self.text(.forbidden, "forbidden: Host is not a loopback name\n"))
        }
    }

    /// A name under `.localhost` other than `localhost` itself (a mirror host or nothing),
    /// lowercased and without a trailing dot; nil for any other name.
    static func mirrorName(_ host: Substring) -> String? {
        var name = host.lowercased()
        if name.hasSuffix(".") { name.removeLast() }
        return name.hasSuffix("." + MirrorOrigin.suffix) ? name : nil
    }

    /// The port the client reached this server on, from its `Host` (80 when it names none).
    static func servePort(of request: Request) -> Int {
        LocalHostAuthority(request.head.authority).port
    }

    /// A request on the mirror host of `origin`: `/.offline-agent/*` is the page's own
    /// lifecycle control (never forwarded); a file the package serves offline comes from
    /// it; everything else goes to the origin.
    func mirror(_ request: Request, origin: MirrorOrigin, mirrors: LocalMirrors.Snapshot) async -> Response {
        if request.uri.path.hasPrefix(LocalLifecycle.routePrefix) { return await lifecycleControl(request) }
        // A valid upgrade never gets here (`LocalServerChannel` relays it): forwarded as
        // plain HTTP it would lose `Upgrade` and open nothing.
        if request.headers[.upgrade]?.lowercased() == "websocket" {
            return Self.text(.badRequest, "bad request: not a valid WebSocket upgrade (GET, Connection: Upgrade, Sec-WebSocket-Key, Sec-WebSocket-Version: 13)\n")
        }
        var reason: FallbackReason?
        switch offline(request, origin: origin, mirrors: mirrors) {
        case .served(var response):
            metrics.recordMirrorHit(app: mirrors.app(origin: origin, path: request.uri.path))
            response.headers[Self.sourceHeader] = "package"
            return response
        case .forward(let why):
            reason = why
        }
        let origins = mirrors.origins
        var response = await proxy.forward(
            request, to: origin, servePort: Self.servePort(of: request), isMirrored: { origins.contains($0) })
        response.headers[Self.sourceHeader] = "origin"
        if let reason { response.headers[Self.fallbackHeader] = reason.rawValue }
        return response
    }

    /// What the package answers for a request on a mirror host.
    enum MirrorAnswer {
        case served(Response)
        /// Not served offline; the kill switch's reason when it is what refused.
        case forward(FallbackReason?)
    }

    /// The offline answer to `request` on `origin`'s mirror, or `.forward`: only GET and
    /// HEAD of a path an active whitelist selects, from a version the kill switch lets
    /// through, naming a file of the package (or a navigation the entry page answers).
    func offline(_ request: Request, origin: MirrorOrigin, mirrors: LocalMirrors.Snapshot) -> MirrorAnswer {
        guard request.method == .get || request.method == .head else { return .forward(nil) }
        let head = request.method == .head
        let path = request.uri.path
        guard let app = mirrors.app(origin: origin, path: path), let pinned = versions.pin(app) else { return .forward(nil) }
        guard let rest = Self.rest(of: path, on: origin, in: pinned) else { return .forward(nil) }
        // The kill switch and bad versions: the page keeps its origin and the origin answers.
        if let reason = pinned.fallback ?? (lifecycle.isBad(app, pinned.version) ? .badVersion : nil) {
            metrics.recordFallback(app: app, reason: reason)
            return .forward(reason)
        }
        if files.resolve(rest, in: pinned.directory) != nil {
            return .served(file(request, pinned: pinned, rest: rest, head: head))
        }
        if rest.percentDecoded == nil { return .forward(nil) }
        // A directory asked for without its slash: send the browser to it, on the mirror.
        if !rest.isEmpty, !rest.hasSuffix("/"), Resolver.file(at: rest + "/", in: pinned.directory) != nil {
            return .served(Self.redirect(.movedPermanently, to: path + "/" + Self.query(of: request)))
        }
        // A single-page route: the navigation gets the entry page, the app's router reads the path.
        if let entryPage = pinned.entryPage, Self.isNavigation(request), files.resolve(entryPage, in: pinned.directory) != nil {
            var response = file(request, pinned: pinned, rest: entryPage, head: head)
            if response.status == .ok || response.status == .notModified {
                response.headers[.cacheControl] = "no-cache"
            }
            return .served(response)
        }
        metrics.recordFallback(app: app, reason: .missingFile)
        return .forward(nil)
    }

    /// What follows the longest of `pinned`'s own whitelist prefixes that selects `path`
    /// on `origin` (the mirrors' snapshot may predate a swap); nil when none does.
    static func rest(of path: String, on origin: MirrorOrigin, in pinned: LocalPin) -> String? {
        let target = ParsedURL(origin: origin, path: path)
        var best: (rest: String, length: Int)?
        for entry in pinned.whitelist {
            guard let prefix = ParsedURL(string: entry), let rest = target.rest(after: prefix) else { continue }
            if best == nil || prefix.path.count > best!.length { best = (rest, prefix.path.count) }
        }
        return best?.rest
    }

    /// A browser navigation: `Sec-Fetch-Mode: navigate`, or an `Accept` naming `text/html`
    /// (for clients that send no fetch metadata).
    static func isNavigation(_ request: Request) -> Bool {
        if let mode = request.headers[secFetchMode] { return mode.lowercased() == "navigate" }
        return request.headers[.accept]?.lowercased().contains("text/html") == true
    }

    static let secFetchMode = HTTPFields.Element.Name("Sec-Fetch-Mode")!

    /// `url` on this server: its mirror URL when its origin is mirrored, else nil.
    func mirrorLocation(of url: URL, request: Request) -> String? {
        guard let origin = MirrorOrigin(url: url), mirrors.snapshot().origins.contains(origin) else { return nil }
        return origin.mirrorURL(for: url, servePort: Self.servePort(of: request))
    }
}
