import FoundationEssentials
import Hummingbird
import OfflineAgent
import OfflineHTTP

/// Where every request `serve` gets is decided (`docs/PROTOCOL.md`, "Local server",
/// "Mirrored origins"): one function from a request's head and the store to a
/// `LocalRoute`. It counts nothing and changes nothing; `LocalServerResponder` answers
/// what it decides.
///
/// In order:
/// 1. `CONNECT` is never served or forwarded: 405.
/// 2. The `Host`: two lines → 400; a name under `.localhost` that mirrors no whitelisted
///    origin → 403; with `checkHost`, any name that is not loopback → 403 (DNS rebinding).
/// 3. `/.offline-agent/mark-good|mark-bad` on a mirror host only: a `POST`, from a page
///    of that origin allowed to speak for the app it names, about the version it runs
///    (`markRoute`). The plain host is one origin for every app, so a path is no identity
///    there: it offers no lifecycle control to pages (404).
/// 4. The plain host: `GET`/`HEAD` only; the control routes; `/<app>/<path>` from the
///    app's active version, the kill switch and bad versions sent to the network.
/// 5. A mirror host: a WebSocket upgrade to the origin's WebSocket (400 when it is not a
///    valid handshake); whitelisted files from the package, single-page navigations to the
///    entry page, everything else (any other method, a path no whitelist selects, the kill
///    switch, a missing file) to the origin.
struct LocalRouter: Sendable {
    let versions: LocalVersions
    let files: LocalFileCache
    let lifecycle: LocalLifecycle
    let mirrors: LocalMirrors
    /// Refuse requests whose `Host` is not a loopback name (off with `--allow-remote`).
    let checkHost: Bool

    /// The route of `request`; `peerIsLoopback`: the connection's peer (its socket
    /// address, not its `Host`) is on this machine's loopback.
    ///
    /// A peer elsewhere (`--allow-remote`) may read packages only: `GET`/`HEAD` of
    /// `/<app>/…`, `/open`, `/session/*` and `/` on the plain host, never counting a
    /// launch. Mirror hosts (which reach the origins: a proxy into them), the lifecycle
    /// control and `/metrics` answer loopback peers only (`403`).
    func route(_ request: Request, peerIsLoopback: Bool = true) -> LocalRoute {
        if request.method == .connect {
            return .refuse(LocalRefusal(status: .methodNotAllowed, text: "CONNECT is not served\n", allow: "GET, HEAD"))
        }
        // RFC 9112 §3.2: more than one Host line is a bad request. The first one became
        // the authority; any left among the fields is a second one.
        if request.headers.contains(Self.hostField) {
            return .refuse(LocalRefusal(status: .badRequest, text: "bad request: more than one Host header\n"))
        }
        let authority = LocalHostAuthority(request.head.authority)
        if !peerIsLoopback, let refusal = Self.remoteRefusal(request, authority: authority) { return .refuse(refusal) }
        if let name = authority.mirrorName, let host = authority.host {
            // A mirror host names its origin in one spelling only (`MirrorOrigin(mirrorHost:)`).
            let snapshot = mirrors.snapshot()
            guard let origin = snapshot.byMirrorHost[name] else {
                return .refuse(LocalRefusal(
                    status: .forbidden, text: "forbidden: \(host) is not the mirror of a whitelisted origin\n", counted: .forbiddenHost))
            }
            return mirror(request, origin: origin, snapshot: snapshot, authority: authority)
        }
        if checkHost, !authority.isLoopback {
            return .refuse(LocalRefusal(status: .forbidden, text: "forbidden: Host is not a loopback name\n", counted: .forbiddenHost))
        }
        return plain(request, authority: authority, peerIsLoopback: peerIsLoopback)
    }

    /// Why a peer that is not on loopback may not have `request` (see `route`); nil when it may.
    private static func remoteRefusal(_ request: Request, authority: LocalHostAuthority) -> LocalRefusal? {
        let path = request.uri.path
        if authority.mirrorName != nil {
            return LocalRefusal(status: .forbidden, text: "forbidden: mirror hosts answer this machine's own clients only\n", counted: .forbiddenHost)
        }
        if path.hasPrefix(LocalLifecycle.routePrefix) {
            return LocalRefusal(status: .forbidden, text: "lifecycle control answers this machine's own clients only", json: true)
        }
        if path == "/metrics" {
            return LocalRefusal(status: .forbidden, text: "forbidden: /metrics answers this machine's own clients only\n")
        }
        return nil
    }

    // MARK: The plain host

    private func plain(_ request: Request, authority: LocalHostAuthority, peerIsLoopback: Bool) -> LocalRoute {
        let path = request.uri.path
        if path.hasPrefix(LocalLifecycle.routePrefix) {
            return .refuse(LocalRefusal(
                status: .notFound,
                text: "the plain host offers no lifecycle control: a page confirms from its own mirror origin (http://<origin host>.localhost:PORT/.offline-agent/…), a host through offline-agent mark-good or the library",
                json: true))
        }
        guard request.method == .get || request.method == .head else {
            return .refuse(LocalRefusal(status: .methodNotAllowed, text: "only GET and HEAD\n", allow: "GET, HEAD"))
        }
        // Launches are counted for the device's own host and web views only.
        let get = request.method == .get && peerIsLoopback
        switch path {
        case "/open": return .control(.open(launch: get && Self.mayCountLaunch(request, authority: authority)))
        case "/session/restore": return .control(.sessionRestore(launch: get && Self.mayCountLaunch(request, authority: authority)))
        case "/session/item": return .control(.sessionItem)
        case "/metrics": return .control(.metrics)
        case "/": return .control(.index)
        default: break
        }
        let (app, slashRest) = Self.appPath(path)
        guard AppName.isValid(app) else { return .refuse(LocalRefusal(status: .notFound, text: "not found\n", counted: .file(app: ""))) }
        // The pin holds the version's directory until the response is fully written.
        guard let pinned = pin(app) else {
            return .refuse(LocalRefusal(status: .notFound, text: "no active version of '\(app)'\n", counted: .file(app: "")))
        }
        // The kill switch and bad versions, in one place for every response made from an
        // app's files (bytes, ranges, 304s, redirects).
        if let reason = offReason(pinned) { return .network(pinned, rest: slashRest ?? "", reason: reason) }
        guard let rest = slashRest else {
            // `/<app>`: the app root is a directory; relative links need the slash.
            return .redirect(location: "/\(app)/" + Self.query(of: request), mirroredApp: nil)
        }
        if files.resolve(rest, in: pinned.directory) != nil { return .file(pinned, rest: rest, source: .plain) }
        if rest.percentDecoded == nil {
            return .refuse(LocalRefusal(status: .badRequest, text: "invalid percent-encoding\n", counted: .file(app: app)))
        }
        if isDirectory(rest, in: pinned) { return .redirect(location: "/\(app)/\(rest)/" + Self.query(of: request), mirroredApp: nil) }
        return .refuse(LocalRefusal(status: .notFound, text: "not found\n", counted: .file(app: app)))
    }

    // MARK: A mirror host

    private func mirror(
        _ request: Request, origin: MirrorOrigin, snapshot: LocalMirrors.Snapshot, authority: LocalHostAuthority
    ) -> LocalRoute {
        let path = request.uri.path
        if path.hasPrefix(LocalLifecycle.routePrefix) {
            return markRoute(request, authority: authority, mirror: (origin, snapshot))
        }
        // A WebSocket is relayed, never forwarded as plain HTTP (which would lose `Upgrade`
        // and open nothing): one that is not a valid handshake is refused.
        if Self.asksForWebSocket(request.headers) {
            guard request.method == .get, Self.isValidHandshake(request.headers) else {
                return .webSocket(origin, refusal: LocalRefusal(
                    status: .badRequest,
                    text: "bad request: not a valid WebSocket upgrade (GET, one Sec-WebSocket-Key, Sec-WebSocket-Version: 13)\n"))
            }
            return .webSocket(origin, refusal: nil)
        }
        let forward = LocalRoute.forward(origin, snapshot, fallback: nil)
        guard request.method == .get || request.method == .head, let app = snapshot.app(origin: origin, path: path),
              let pinned = pin(app), let rest = Self.rest(of: path, on: origin, in: pinned)
        else { return forward }
        // The kill switch and bad versions: the page keeps its origin and the origin answers.
        if let reason = offReason(pinned) { return .forward(origin, snapshot, fallback: (app, reason)) }
        if files.resolve(rest, in: pinned.directory) != nil { return .file(pinned, rest: rest, source: .mirror) }
        if rest.percentDecoded == nil { return forward }
        if isDirectory(rest, in: pinned) { return .redirect(location: path + "/" + Self.query(of: request), mirroredApp: app) }
        // A single-page route: the navigation gets the entry page, the app's router reads the path.
        if let entryPage = pinned.entryPage, Self.isNavigation(request), files.resolve(entryPage, in: pinned.directory) != nil {
            return .file(pinned, rest: entryPage, source: .entryPage)
        }
        return .forward(origin, snapshot, fallback: (app, .missingFile))
    }

    /// The version of `app` a response is made from: the active one, or, while a recorded
    /// rollback from a bad active version has not switched `current` yet, the version it
    /// switches to, so a page loading during a rollback never leaves the package.
    private func pin(_ app: String) -> LocalPin? {
        guard let active = versions.pin(app) else { return nil }
        guard let target = lifecycle.rollbackTarget(app, from: active.version), let pinned = versions.pin(app, version: target)
        else { return active }
        return pinned
    }

    /// Why `pinned` must not be served: the kill switch, or a bad mark; nil when it may be.
    private func offReason(_ pinned: LocalPin) -> FallbackReason? {
        pinned.fallback ?? (lifecycle.isBad(pinned.app, pinned.version) ? .badVersion : nil)
    }

    /// A directory asked for without its slash.
    private func isDirectory(_ rest: String, in pinned: LocalPin) -> Bool {
        !rest.isEmpty && !rest.hasSuffix("/") && Resolver.file(at: rest + "/", in: pinned.directory) != nil
    }

    // MARK: The page's lifecycle control

    /// `POST /.offline-agent/mark-good|mark-bad?app=NAME&version=V` on a mirror host.
    /// Anything that changes an app's lifecycle is reachable only by `POST`, with a loopback
    /// `Host`, from a page of the mirrored origin allowed to speak for the app (`mayControl`),
    /// naming the version it runs; every other request is refused and changes nothing.
    private func markRoute(
        _ request: Request, authority: LocalHostAuthority, mirror: (origin: MirrorOrigin, snapshot: LocalMirrors.Snapshot)
    ) -> LocalRoute {
        let action = String(request.uri.path.dropFirst(LocalLifecycle.routePrefix.count))
        guard let mark = LocalMark(rawValue: action) else {
            return .refuse(LocalRefusal(
                status: .notFound, text: "unknown control route; POST /.offline-agent/mark-good or /.offline-agent/mark-bad", json: true))
        }
        guard request.method == .post else {
            return .refuse(LocalRefusal(status: .methodNotAllowed, text: "only POST", allow: "POST", json: true))
        }
        guard authority.isLoopback else {
            return .refuse(LocalRefusal(status: .forbidden, text: "Host is not a loopback name", json: true))
        }
        guard let app = request.uri.queryParameters[values: "app"].last.map(String.init), AppName.isValid(app) else {
            return .refuse(LocalRefusal(status: .badRequest, text: "missing or invalid query parameter 'app'", json: true))
        }
        guard let text = request.uri.queryParameters[values: "version"].last, !text.isEmpty else {
            return .refuse(LocalRefusal(
                status: .badRequest,
                text: "missing query parameter 'version': the version the page runs (its X-Offline-Version header); nothing changed",
                json: true))
        }
        guard let version = Version(String(text)) else {
            return .refuse(LocalRefusal(status: .badRequest, text: "invalid query parameter 'version'; nothing changed", json: true))
        }
        if let refusal = Self.mayControl(request, app: app, authority: authority, mirror: mirror) {
            return .refuse(LocalRefusal(status: .forbidden, text: refusal, json: true))
        }
        return .control(.mark(mark, app: app, version: version))
    }

    /// Nil when the page that sent `request` may confirm or report `app`; else why not.
    ///
    /// The request's own origin is `http://` and its `Host`. An `Origin` must be it, and a
    /// `Referer` must be a URL on it; the request must carry one of them (a page sent it).
    /// The mirrored origin must be `app`'s: named by its active whitelist, which no other
    /// app shares (`OriginClaims`).
    static func mayControl(
        _ request: Request, app: String, authority: LocalHostAuthority,
        mirror: (origin: MirrorOrigin, snapshot: LocalMirrors.Snapshot)
    ) -> String? {
        let own = "http://" + (authority.value ?? "")
        let origin = request.headers[.origin], referer = request.headers[.referer]
        if let origin, origin != own { return "Origin \(origin) is not this server" }
        if let referer, !referer.hasPrefix(own + "/") { return "Referer \(referer) is not on this server" }
        guard mirror.snapshot.prefixes[mirror.origin]?.contains(where: { $0.app == app }) == true else {
            return "\(mirror.origin.origin) is not named by the whitelist of '\(app)'"
        }
        return origin != nil || referer != nil ? nil : "no Origin or Referer: only a page of \(mirror.origin.origin) may"
    }

    // MARK: Launches

    /// Whether a `GET` of `/open` or `/session/restore` may count a launch: only a
    /// navigation the host or its web view makes. With fetch metadata, `Sec-Fetch-Site` is
    /// `none` (the host loaded the URL) or `same-origin`, `Sec-Fetch-Mode` is `navigate`, and
    /// `Sec-Fetch-Dest` a document or frame; without it (clients that send none), an
    /// `Origin` or `Referer`, when sent, must be this server's own. A request another site
    /// makes (an `<img>`, a `fetch`, a link) never counts.
    static func mayCountLaunch(_ request: Request, authority: LocalHostAuthority) -> Bool {
        let fields = request.headers
        if let site = fields[secFetchSite]?.lowercased(), site != "none", site != "same-origin" { return false }
        if let mode = fields[secFetchMode]?.lowercased(), mode != "navigate" { return false }
        if let dest = fields[secFetchDest]?.lowercased(), !["document", "iframe", "frame"].contains(dest) { return false }
        let own = "http://" + (authority.value ?? "")
        if let origin = fields[.origin], origin != own { return false }
        if let referer = fields[.referer], !referer.hasPrefix(own + "/") { return false }
        return true
    }

    // MARK: Pieces of a request

    /// `/<app>[/<rest>]` split: the app's name, and what follows its slash (nil when no slash does).
    static func appPath(_ path: String) -> (app: String, rest: String?) {
        let afterSlash = path.dropFirst()
        guard let slash = afterSlash.firstIndex(of: "/") else { return (String(afterSlash), nil) }
        return (String(afterSlash[..<slash]), String(afterSlash[afterSlash.index(after: slash)...]))
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

    /// An `Upgrade` naming `websocket` among its protocols.
    static func asksForWebSocket(_ fields: HTTPFields) -> Bool {
        fields[values: .upgrade].contains { value in
            value.split(separator: ",").contains { $0.trimmingWhitespace().lowercased() == "websocket" }
        }
    }

    /// The key and version RFC 6455 §4.2.1 requires of the client's handshake: one
    /// `Sec-WebSocket-Key` of 16 bytes in base64, one `Sec-WebSocket-Version: 13`.
    static func isValidHandshake(_ fields: HTTPFields) -> Bool {
        let keys = fields[values: secWebSocketKey], versions = fields[values: secWebSocketVersion]
        guard keys.count == 1, versions.count == 1, versions[0].trimmingWhitespace() == "13" else { return false }
        let key = keys[0].trimmingWhitespace()
        // 16 bytes in base64: 22 characters and `==`.
        return key.utf8.count == 24 && key.hasSuffix("==")
    }

    /// A browser navigation: `Sec-Fetch-Mode: navigate`, or an `Accept` naming `text/html`
    /// (for clients that send no fetch metadata).
    static func isNavigation(_ request: Request) -> Bool {
        if let mode = request.headers[secFetchMode] { return mode.lowercased() == "navigate" }
        return request.headers[.accept]?.lowercased().contains("text/html") == true
    }

    /// A name under `.localhost` other than `localhost` itself (a mirror host or nothing),
    /// lowercased and without a trailing dot; nil for any other name.
    static func mirrorName(_ host: Substring) -> String? {
        var name = host.lowercased()
        if name.hasSuffix(".") { name.removeLast() }
        return name.hasSuffix("." + MirrorOrigin.suffix) ? name : nil
    }

    static func query(of request: Request) -> String {
        request.uri.query.map { "?\($0)" } ?? ""
    }

    static let hostField = HTTPFields.Element.Name("Host")!
    static let secFetchMode = HTTPFields.Element.Name("Sec-Fetch-Mode")!
    static let secFetchSite = HTTPFields.Element.Name("Sec-Fetch-Site")!
    static let secFetchDest = HTTPFields.Element.Name("Sec-Fetch-Dest")!
    static let secWebSocketKey = HTTPFields.Element.Name("Sec-WebSocket-Key")!
    static let secWebSocketVersion = HTTPFields.Element.Name("Sec-WebSocket-Version")!
}
