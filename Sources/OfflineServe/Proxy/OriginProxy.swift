import Hummingbird
import OfflineAgent

/// Forwards a request made on a mirrored origin (`MirrorOrigin`) to the origin itself
/// and streams the answer back (`docs/PROTOCOL.md`, "Mirrored origins").
///
/// STUB: answers 502 until the forwarding lands. The signature is the contract between
/// the responder (which decides *what* is forwarded: only origins an active whitelist
/// names) and the proxy (which decides *how*).
package struct OriginProxy: Sendable {
    package init() {}

    /// Forwards `request` to `origin` (the request arrived on `origin.mirrorHost`, on
    /// the server's port `servePort`). `isMirrored` says which other origins are
    /// mirrored, for rewriting `Location` headers that point at them.
    package func forward(
        _ request: Request, to origin: MirrorOrigin, servePort: Int,
        isMirrored: @escaping @Sendable (MirrorOrigin) -> Bool
    ) async -> Response {
        var response = Response(status: .badGateway, body: .init(byteBuffer: .init(string: "offline-agent: forwarding to \(origin) is not available\n")))
        response.headers[.contentType] = "text/plain; charset=utf-8"
        return response
    }
}
