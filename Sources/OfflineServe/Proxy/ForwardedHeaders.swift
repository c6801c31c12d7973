import HTTPTypes
import Hummingbird
import NIOHTTP1
import OfflineAgent
import OfflineHTTP

/// The header rules of forwarding (`docs/PROTOCOL.md`, "Mirrored origins", "Forwarding"):
/// what a request on a mirror carries to its origin, and what the origin's answer
/// carries back to the page.
///
/// Both ways, hop-by-hop headers (RFC 9110 §7.6.1: `Connection`, every name it lists,
/// `Keep-Alive`, `Proxy-Connection`, `TE`, `Trailer`, `Transfer-Encoding`, `Upgrade`)
/// belong to one connection and are dropped; framing is redone per side (`Content-Length`
/// is kept, a body of unknown length is chunked again). Every other header passes
/// unchanged, in order, repeated lines kept, except the ones named below.
enum ForwardedHeaders {
    /// What the rules make of a field, by its name (any case). Hop-by-hop: `Connection`,
    /// `Keep-Alive`, `Proxy-Connection`, `TE`, `Trailer`, `Transfer-Encoding`, `Upgrade`,
    /// and `Proxy-Authenticate` and `Proxy-Authorization`, which belong to a proxy the page
    /// never asked for.
    enum Name {
        case hopByHop, host, expect, cookie, origin, referer, location, setCookie, source, fallback, contentLength, other
    }

    /// The names the rules single out, lowercased.
    private static let names: [String: Name] = [
        "connection": .hopByHop, "keep-alive": .hopByHop, "proxy-connection": .hopByHop, "te": .hopByHop,
        "trailer": .hopByHop, "transfer-encoding": .hopByHop, "upgrade": .hopByHop, "proxy-authenticate": .hopByHop,
        "proxy-authorization": .hopByHop, "host": .host, "expect": .expect, "cookie": .cookie, "origin": .origin,
        "referer": .referer, "location": .location, "content-location": .location, "set-cookie": .setCookie,
        "x-offline-source": .source, "x-offline-fallback": .fallback, "content-length": .contentLength,
    ]

    /// What the field named `name` is, in any case.
    static func name(_ name: String) -> Name {
        names[name.lowercased()] ?? .other
    }

    /// The fields that frame a message (RFC 9112 §6): never hop-by-hop by a `Connection`
    /// listing, whatever it says. Dropping one would send a body unframed: the origin would
    /// read it as a request of its own.
    private static let framing: Set<String> = ["content-length", "transfer-encoding", "host"]

    /// The names `Connection` headers list, lowercased (each is hop-by-hop too), other than
    /// `keep-alive` (hop-by-hop by its name) and the framing fields, which stay what they are.
    static func connectionOptions<S: Sequence<String>>(_ connectionValues: S) -> Set<String> {
        var names: Set<String> = []
        for value in connectionValues {
            for token in value.split(separator: ",") {
                let name = token.trimmingWhitespace().lowercased()
                if name.isEmpty || name == "keep-alive" || framing.contains(name) { continue }
                names.insert(name)
            }
        }
        return names
    }

    /// The request's headers as sent to `origin`.
    ///
    /// - `Host` is not copied: the client writes the origin's authority.
    /// - `Origin`, and `Referer` when it points at a mirror, name the origin the mirror
    ///   stands for, so the origin's CORS and CSRF checks see its own (or another
    ///   mirrored origin's) URL, never a `.localhost` one.
    /// - `Expect` is dropped: the body is streamed without waiting for a `100 Continue`.
    /// - `Cookie` lines (which the server may have split per cookie) go as one line, `; `-joined.
    /// - No `X-Forwarded-*` or `Forwarded` header is added: for the origin, the request
    ///   comes from the device as the page would have sent it.
    static func request(_ fields: HTTPFields, servePort: Int) -> HTTPHeaders {
        let listed = connectionOptions(fields[values: .connection])
        var headers = HTTPHeaders()
        headers.reserveCapacity(fields.count)
        let cookies = fields[values: .cookie]
        if !cookies.isEmpty { headers.add(name: "Cookie", value: cookies.joined(separator: "; ")) }
        for field in fields where !listed.contains(field.name.canonicalName) {
            add(field.name.rawName, field.value, as: RequestField(name(field.name.canonicalName)), servePort: servePort, to: &headers)
        }
        return headers
    }

    /// What a request's field becomes on its way to the origin.
    enum RequestField {
        case dropped
        /// Joined with the request's other `Cookie` lines.
        case cookie
        case origin
        case referer
        case kept

        /// The rule for a field named `name` (the names a request's `Connection` lists are
        /// the caller's to drop): hop-by-hop, `Host` and `Expect` never reach the origin.
        init(_ name: Name) {
            switch name {
            case .hopByHop, .host, .expect: self = .dropped
            case .cookie: self = .cookie
            case .origin: self = .origin
            case .referer: self = .referer
            default: self = .kept
            }
        }
    }

    /// Adds a request's field to `headers`, as `field` says (a `.cookie` is the caller's).
    private static func add(_ name: String, _ value: String, as field: RequestField, servePort: Int, to headers: inout HTTPHeaders) {
        switch field {
        case .dropped, .cookie:
            return
        case .origin:
            headers.add(name: name, value: originValue(value, servePort: servePort))
        case .referer:
            headers.add(name: name, value: LocationRewriter.toOrigin(value, servePort: servePort) ?? value)
        case .kept:
            headers.add(name: name, value: value)
        }
    }

    /// The head sent to `origin` for a request of `method` to `target` whose fields became
    /// `headers` (`request`): the origin's `Host`, and the body framed as it came
    /// (`contentLength`, or `chunked`). `retriable`: the request may be sent again on a new
    /// connection when a kept one turns out closed (no body, an idempotent method, RFC 9110 §9.2.2).
    static func requestHead(
        _ method: HTTPMethod, target: String, headers: HTTPHeaders, origin: MirrorOrigin, contentLength: String?, chunked: Bool
    ) -> (head: HTTPRequestHead, retriable: Bool) {
        var headers = headers
        // The origin's host, and its port when not the default (`request` dropped the page's).
        headers.add(name: "Host", value: String(origin.authority))
        let hasBody = chunked || (contentLength.map { $0 != "0" } ?? false)
        if chunked, contentLength == nil {
            headers.add(name: "Transfer-Encoding", value: "chunked")
        } else if contentLength == nil, !bodilessMethods.contains(method.rawValue) {
            // A POST without a body is sent framed as empty, as browsers frame it
            // (RFC 9110 §8.6: methods that expect no body get no `Content-Length`).
            headers.add(name: "Content-Length", value: "0")
        }
        let head = HTTPRequestHead(version: .http1_1, method: method, uri: target, headers: headers)
        return (head, !hasBody && idempotentMethods.contains(method.rawValue))
    }

    private static let bodilessMethods: Set<String> = ["GET", "HEAD", "DELETE", "CONNECT", "TRACE"]
    private static let idempotentMethods: Set<String> = ["GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"]

    /// Calls `body` with each field of the origin's answer as the page gets it, in order:
    /// hop-by-hop dropped, `Location` and `Content-Location` moved to the mirror
    /// (`LocationRewriter`), `Set-Cookie` made to hold on the mirror host
    /// (`SetCookieRewriter`); then, with `source`, `X-Offline-Source: origin` and, with a
    /// `fallback`, `X-Offline-Fallback`, each replacing any the origin sent (only this server
    /// says where an answer came from).
    static func forEachResponseField(
        _ headers: HTTPHeaders, origin: MirrorOrigin, servePort: Int, isMirrored: (MirrorOrigin) -> Bool,
        source: Bool = false, fallback: String? = nil, _ body: (_ name: String, _ value: String) -> Void
    ) {
        let listed = connectionOptions(headers[canonicalForm: "connection"].map(String.init))
        for (name, value) in headers {
            if !listed.isEmpty, listed.contains(name.lowercased()) { continue }
            switch Self.name(name) {
            case .hopByHop:
                continue
            case .location:
                body(name, LocationRewriter.toMirror(value, servePort: servePort, isMirrored: { $0 == origin || isMirrored($0) }) ?? value)
            case .setCookie:
                body(name, SetCookieRewriter.rewrite(value, origin: origin))
            case .source where source, .fallback where fallback != nil:
                continue
            default:
                body(name, value)
            }
        }
        if source { body(LocalServerResponder.sourceHeader.rawName, "origin") }
        if let fallback { body(LocalServerResponder.fallbackHeader.rawName, fallback) }
    }

    /// An `Origin` header naming a mirror, as the origin it stands for; `null` and
    /// any other origin pass unchanged.
    static func originValue(_ value: String, servePort: Int) -> String {
        LocationRewriter.toOrigin(value, servePort: servePort).map { rewritten in
            // `Origin` never has a path; the rewrite of `http://m:1` is `https://o/`.
            rewritten.hasSuffix("/") && !value.hasSuffix("/") ? String(rewritten.dropLast()) : rewritten
        } ?? value
    }
}
