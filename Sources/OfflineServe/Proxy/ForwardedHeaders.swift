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
    /// Hop-by-hop names, lowercased. `Proxy-Authenticate` and `Proxy-Authorization` belong
    /// to a proxy the page never asked for, so they go too.
    static let hopByHop: Set<String> = [
        "connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade",
        "proxy-authenticate", "proxy-authorization",
    ]

    /// What a request never carries to its origin, whatever its `Connection` lists.
    private static let requestDropped = hopByHop.union(["host", "expect"])

    /// The names a `Connection` header lists, lowercased (each is hop-by-hop too), other
    /// than `keep-alive`, which `hopByHop` already has: most origins list only that one,
    /// so most answers make no set here.
    static func connectionOptions<S: Sequence<String>>(_ connectionValues: S) -> Set<String> {
        var names: Set<String> = []
        for value in connectionValues where !isKeepAlive(value[...]) {
            for token in value.split(separator: ",") {
                let name = token.trimmingWhitespace()
                if name.isEmpty || isKeepAlive(name) { continue }
                names.insert(name.lowercased())
            }
        }
        return names
    }

    /// Whether `token` is `keep-alive`, in any case.
    private static func isKeepAlive(_ token: Substring) -> Bool {
        token.utf8.elementsEqual("keep-alive".utf8, by: { asciiLowercased($0) == $1 })
    }

    /// `byte`, lowercased when it is an ASCII capital letter.
    private static func asciiLowercased(_ byte: UInt8) -> UInt8 {
        (0x41...0x5A).contains(byte) ? byte | 0x20 : byte
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
        let drop = listed.isEmpty ? requestDropped : requestDropped.union(listed)
        var headers = HTTPHeaders()
        headers.reserveCapacity(fields.count)
        let cookies = fields[values: .cookie]
        if !cookies.isEmpty { headers.add(name: "Cookie", value: cookies.joined(separator: "; ")) }
        for field in fields {
            let name = field.name.canonicalName
            guard !drop.contains(name) else { continue }
            switch name {
            case "cookie":
                continue
            case "origin":
                headers.add(name: field.name.rawName, value: originValue(field.value, servePort: servePort))
            case "referer":
                headers.add(name: field.name.rawName, value: LocationRewriter.toOrigin(field.value, servePort: servePort) ?? field.value)
            default:
                headers.add(name: field.name.rawName, value: field.value)
            }
        }
        return headers
    }

    /// The origin's response headers as sent to the page: hop-by-hop dropped, `Location`
    /// and `Content-Location` moved to the mirror (`LocationRewriter`), `Set-Cookie`
    /// made to hold on the mirror host (`SetCookieRewriter`). In HTTP/1 form, as the
    /// origin's decoder gave them and the page's encoder takes them (`OriginExchange`).
    static func response(
        _ headers: HTTPHeaders, origin: MirrorOrigin, servePort: Int, isMirrored: (MirrorOrigin) -> Bool
    ) -> HTTPHeaders {
        let listed = connectionOptions(headers["connection"])
        let drop = listed.isEmpty ? hopByHop : hopByHop.union(listed)
        var forwarded = HTTPHeaders()
        forwarded.reserveCapacity(headers.count)
        for (name, value) in headers {
            let lowercased = name.lowercased()
            guard !drop.contains(lowercased) else { continue }
            switch lowercased {
            case "location", "content-location":
                let moved = LocationRewriter.toMirror(value, servePort: servePort, isMirrored: { $0 == origin || isMirrored($0) })
                forwarded.add(name: name, value: moved ?? value)
            case "set-cookie":
                forwarded.add(name: name, value: SetCookieRewriter.rewrite(value, origin: origin))
            default:
                forwarded.add(name: name, value: value)
            }
        }
        return forwarded
    }

    /// `response` as `HTTPFields`, for a Hummingbird `Response` (`OriginProxy`). Built field
    /// by field: NIO's conversion of `HTTPHeaders` is for request heads and drops a `Host`.
    static func responseFields(
        _ headers: HTTPHeaders, origin: MirrorOrigin, servePort: Int, isMirrored: (MirrorOrigin) -> Bool
    ) -> HTTPFields {
        var fields = HTTPFields()
        for (name, value) in response(headers, origin: origin, servePort: servePort, isMirrored: isMirrored) {
            if let name = HTTPField.Name(name) { fields.append(HTTPField(name: name, value: value)) }
        }
        return fields
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
