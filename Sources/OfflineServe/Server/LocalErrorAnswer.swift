import FoundationEssentials
import Hummingbird
import NIOCore
import NIOHTTP1
import OfflineAgent

/// Every error answer `serve` gives, wherever on a connection it is decided (the
/// connection cap, the request decoder, the upgrade filter, the router, the responder, the
/// proxy): a status, why in one line (text, or `{"error": …}` in JSON for a page's
/// lifecycle control), and whether the connection ends with it. Rendered here once, into
/// the fields and bytes each writer sends as they are (`response`, `nioHead`, `wire`).
struct LocalErrorAnswer: Sendable {
    let status: HTTPResponse.Status
    /// Every field of the answer, in order: type, length, `Cache-Control: no-store`,
    /// `fields` given, `Connection: close` when the connection ends.
    let fields: HTTPFields
    let body: ByteBuffer

    /// What the answer says.
    enum Reason: Sendable {
        /// A line of text (it ends with a newline).
        case text(String)
        /// A JSON object of strings (a page's lifecycle control reads it).
        case json([String: String])
    }

    /// An answer with `status` saying `reason`; `closes`: the connection ends with it;
    /// `fields`: what else it says (`Allow`, `Retry-After`, `X-Offline-Source`, …).
    init(_ status: HTTPResponse.Status, _ reason: Reason, closes: Bool = false, fields extra: HTTPFields = [:]) {
        var body = ByteBuffer()
        let type: String
        switch reason {
        case .text(let text):
            type = "text/plain; charset=utf-8"
            body.writeString(text.hasSuffix("\n") ? text : text + "\n")
        case .json(let object):
            type = "application/json"
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            body.writeBytes((try? encoder.encode(object)) ?? Data("{}".utf8))
            body.writeString("\n")
        }
        var fields: HTTPFields = [.contentType: type, .contentLength: String(body.readableBytes), .cacheControl: "no-store"]
        fields.append(contentsOf: extra)
        if closes { fields[.connection] = "close" }
        self.status = status
        self.fields = fields
        self.body = body
    }

    /// A request `LocalRouter` refused: in JSON for the page's lifecycle control, else in
    /// text; a refusal for what the request is (not for a file that is missing) ends the
    /// connection, so whoever sent it gets nothing more on it.
    init(_ refusal: LocalRefusal) {
        self.init(
            refusal.status, refusal.json ? .json(["error": refusal.text]) : .text(refusal.text), closes: refusal.status != .notFound,
            fields: refusal.allow.map { [.allow: $0] } ?? [:])
    }

    /// The answer of a responder; `head`: to a `HEAD` request (the fields, no body).
    func response(head: Bool = false) -> Response {
        Response(status: status, headers: fields, body: head ? ResponseBody() : ResponseBody(byteBuffer: body))
    }

    /// The answer's head for a NIO handler in front of the responder.
    var nioHead: HTTPResponseHead {
        HTTPResponseHead(
            version: .http1_1, status: HTTPResponseStatus(statusCode: status.code, reasonPhrase: status.reasonPhrase),
            headers: HTTPHeaders(fields.map { ($0.name.rawName, $0.value) }))
    }

    /// Writes the whole answer on `context` (a handler whose outbound parts are
    /// `HTTPServerResponsePart`), then closes the connection once it has gone out.
    func writeThenClose(on context: ChannelHandlerContext) {
        context.write(NIOAny(HTTPServerResponsePart.head(nioHead)), promise: nil)
        context.write(NIOAny(HTTPServerResponsePart.body(.byteBuffer(body))), promise: nil)
        context.writeAndFlush(NIOAny(HTTPServerResponsePart.end(nil))).assumeIsolated().whenComplete { _ in
            context.close(promise: nil)
        }
    }

    /// The answer as bytes on the wire, for a connection with no HTTP pipeline.
    var wire: ByteBuffer {
        var bytes = ByteBuffer(string: "HTTP/1.1 \(status.code) \(status.reasonPhrase)\r\n")
        for field in fields { bytes.writeString("\(field.name.rawName): \(field.value)\r\n") }
        bytes.writeString("\r\n")
        bytes.writeImmutableBuffer(body)
        return bytes
    }

    // MARK: The answers given in more than one place

    /// The origin of a mirror host gave no answer (`why`, in a line): `502`, said to come
    /// from the origin's side; `fallback`: why the package did not answer.
    static func unreachable(_ origin: MirrorOrigin, why: String, fallback: String? = nil, closes: Bool = false) -> LocalErrorAnswer {
        var fields: HTTPFields = [LocalServerResponder.sourceHeader: "origin"]
        if let fallback { fields[LocalServerResponder.fallbackHeader] = fallback }
        return LocalErrorAnswer(.badGateway, .text("offline-agent: cannot reach \(origin.origin): \(why)"), closes: closes, fields: fields)
    }

    /// A request body that cannot be read to its end (`LocalRequestFraming.BrokenBody`).
    static let brokenBody = LocalErrorAnswer(
        .badRequest, .text("bad request: the request body is not valid HTTP/1.1 or was cut off"), closes: true)

    /// A request the decoder refused (`headerOverflow`: `431`).
    static func undecodable(headerOverflow: Bool) -> LocalErrorAnswer {
        headerOverflow
            ? LocalErrorAnswer(.requestHeaderFieldsTooLarge, .text("request header fields too large"), closes: true)
            : LocalErrorAnswer(.badRequest, .text("bad request: not valid HTTP/1.1"), closes: true)
    }

    /// A connection past the cap with none idle to take the place of.
    static let tooManyConnections = LocalErrorAnswer(
        .serviceUnavailable, .text("too many open connections"), closes: true, fields: [.retryAfter: "1"])
}
