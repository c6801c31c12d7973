import HTTPTypes
import NIOHTTP1
import OfflineAgent

extension ForwardedHeaders {
    /// The handshake's own headers, made anew for each connection: the key and version by
    /// the upgrade to the origin, the accept by this server's answer to the page. No
    /// extension is negotiated (frames are relayed as they are, uncompressed).
    static let webSocketHandshake: Set<String> = [
        "sec-websocket-key", "sec-websocket-version", "sec-websocket-accept", "sec-websocket-extensions",
    ]

    /// A page's WebSocket upgrade request headers as sent to the origin: the rules of
    /// `request(_:servePort:)` (hop-by-hop dropped, `Cookie` joined, `Origin` and `Referer`
    /// mapped from the mirror to the origin), the handshake's own headers dropped, and
    /// `Sec-WebSocket-Protocol` kept as the page offered it.
    static func webSocketRequest(_ headers: HTTPHeaders, servePort: Int) -> HTTPHeaders {
        var fields = HTTPFields()
        for (name, value) in headers {
            guard let fieldName = HTTPField.Name(name), !webSocketHandshake.contains(fieldName.canonicalName) else { continue }
            fields.append(HTTPField(name: fieldName, value: value))
        }
        return request(fields, servePort: servePort)
    }

    /// The headers of the page's `101` from the origin's: only its
    /// `Sec-WebSocket-Protocol` choice (cookies set by the origin's `101` are
    /// made to hold on the mirror, as on any answer).
    static func webSocketResponse(_ headers: HTTPHeaders, origin: MirrorOrigin) -> HTTPHeaders {
        var out = HTTPHeaders()
        for (name, value) in headers {
            switch name.lowercased() {
            case "sec-websocket-protocol": out.add(name: "Sec-WebSocket-Protocol", value: value)
            case "set-cookie": out.add(name: "Set-Cookie", value: SetCookieRewriter.rewrite(value, origin: origin))
            default: continue
            }
        }
        return out
    }
}
