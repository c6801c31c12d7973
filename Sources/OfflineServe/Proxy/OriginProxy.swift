#if canImport(Glibc)
import Glibc
#endif
import Hummingbird
import NIOCore
import NIOHTTP1
import NIOPosix
import OfflineAgent
import OfflineHTTP

/// Forwards a request made on a mirrored origin (`MirrorOrigin`) to the origin itself
/// and streams the answer back (`docs/PROTOCOL.md`, "Mirrored origins", "Forwarding"):
/// the one origin client of `serve`.
///
/// The method, the target (path and query, byte for byte as the page sent them), the
/// headers (see `ForwardedHeaders`) and the body go to the origin as they came, the body
/// streamed with its framing (`Content-Length`, or chunked); the origin's status,
/// headers and body come back the same way, streamed with backpressure, so neither body
/// is ever held whole in memory (`OriginExchange`, on pooled connections of its own).
/// Redirects are passed to the page (their `Location` moved to the mirror), never
/// followed here, and nothing is decompressed.
///
/// AsyncHTTPClient, which the agent uses for its own downloads, rebuilds a request's
/// target from a parsed URL: a path with `%ff` reached an origin as `/`, and `%` or `\`
/// were re-encoded. A forward must not change what the page asked for.
///
/// An origin that cannot be reached (refused, unresolvable, no connection within the
/// connect timeout, no byte of an answer within the read timeout) gets a 502 with a
/// one-line text reason. A response the origin cuts off after it began is cut off for
/// the page too (the connection is closed), never ended as if complete. Likewise a page's
/// body that breaks off (invalid chunked framing, or the page's side ending before the
/// body's end: `LocalRequestFraming.BrokenBody`) never reaches the origin as complete: the
/// origin connection is aborted without the body's end, and the page gets `400` and the
/// close (`OriginExchange.pageBodyBroken`).
///
/// The responder decides *what* is forwarded (only origins an active whitelist names);
/// the proxy decides *how*.
package struct OriginProxy: Sendable {
    /// Timeouts for the connections to origins.
    package struct Configuration: Sendable, Equatable {
        /// A connection to the origin must be made within this time (refused fails at once).
        package var connectTimeout: Duration
        /// The origin must send something within this time whenever the proxy waits for it.
        package var readTimeout: Duration

        package init(connectTimeout: Duration = .seconds(5), readTimeout: Duration = .seconds(60)) {
            self.connectTimeout = connectTimeout
            self.readTimeout = readTimeout
        }
    }

    package let configuration: Configuration
    private let metrics: LocalServerMetrics?

    package init(configuration: Configuration = Configuration(), metrics: LocalServerMetrics? = nil) {
        self.configuration = configuration
        self.metrics = metrics
    }

    /// Forwards `request` to `origin` (the request arrived on `origin.mirrorHost`, on
    /// the server's port `servePort`) over the connection `page`, on an origin connection of
    /// its event loop's pool. `fallback`: why the package did not answer, for
    /// `X-Offline-Fallback`. `isMirrored` says which other origins are mirrored, for
    /// rewriting `Location` headers that point at them.
    package func forward(
        _ request: Request, to origin: MirrorOrigin, servePort: Int, fallback: FallbackReason? = nil, page: any Channel,
        isMirrored: @escaping @Sendable (MirrorOrigin) -> Bool
    ) async -> Response {
        let fields = request.headers
        let contentLength = fields[.contentLength], chunked = fields[.transferEncoding] != nil
        let head = ForwardedHeaders.requestHead(
            HTTPMethod(rawValue: request.method.rawValue), target: request.head.path ?? "/",
            headers: ForwardedHeaders.request(fields, servePort: servePort), origin: origin, contentLength: contentLength, chunked: chunked)
        let configuration = configuration, metrics = metrics
        let hasBody = chunked || (contentLength.map { $0 != "0" } ?? false)
        let eventLoop = page.eventLoop
        let call: OriginCall.Handle
        do {
            call = try await OriginCall.start(for: page, hasBody: hasBody) { call, onEnd, onOriginWritable in
                OriginExchange(
                    head, to: origin, servePort: servePort, fallback: fallback, isMirrored: isMirrored, page: call,
                    pool: .of(eventLoop), configuration: configuration, metrics: metrics, onEnd: onEnd, onOriginWritable: onOriginWritable)
            }
        } catch {
            return LocalErrorAnswer(.serviceUnavailable, .text("offline-agent: the server is stopping"), closes: true).response(head: request.method == .head)
        }
        let upload = UploadProgress()
        if hasBody {
            let body = ForwardedRequestBody(body: request.body, progress: upload)
            let length = chunked ? nil : contentLength.flatMap { Int($0.trimmingWhitespace()) }
            Task {
                do {
                    var sent = 0, sending = true
                    for try await chunk in body {
                        guard sending else { continue }
                        sent += chunk.readableBytes
                        // A body of a known length ends with its last byte, not when the page's
                        // decoder says so a moment later.
                        let last = length.map { sent >= $0 } ?? false
                        sending = await call.send(chunk, end: last) && !last
                        // The origin answered without the rest: a small rest is read and dropped so
                        // the page's connection goes on; a large one ends it (`closeIfUploading`).
                        if !sending, !last, (length ?? .max) - sent > Self.drainLimit { return }
                    }
                    if sending { _ = await call.send(nil) }
                } catch {
                    // The body broke off (`LocalRequestFraming.BrokenBody`) or the page's connection
                    // failed: the origin never gets the request's end.
                    call.bodyBroke()
                }
            }
        }
        guard let answer = try? await call.head.get() else {
            return LocalErrorAnswer.unreachable(origin, why: "no answer", fallback: fallback?.rawValue, closes: true)
                .response(head: request.method == .head)
        }
        let body = ResponseBody { writer in
            // Thrown out of the body, an error makes the server close the connection: the
            // page sees a broken response, not a short one.
            for try await chunk in call.body { try await writer.write(chunk) }
            try await writer.finish(nil)
            try await Self.closeIfUploading(upload)
        }
        return Response(status: answer.status, headers: answer.fields, body: body)
    }

    /// The most of a page's body read and dropped after the origin answered without it.
    static let drainLimit = 64 * 1024

    /// Thrown after a complete response, so the server closes the connection rather than
    /// read its next request while the upload may still be reading the same stream.
    struct UnfinishedUpload: Error {}

    static func closeIfUploading(_ upload: UploadProgress) async throws {
        if await !upload.settled() { throw UnfinishedUpload() }
    }

    /// The metrics reason and the one-line explanation of a failed request.
    static func describe(_ error: any Error) -> (reason: String, why: String) {
        if error is OriginConnection.HandshakeTimeout {
            return ("timeout", "no TLS handshake within the connect timeout")
        }
        if let error = error as? ChannelError, case .connectTimeout = error {
            return ("timeout", "no connection within the connect timeout")
        }
        if let error = error as? NIOConnectionError, error.connectionErrors.isEmpty, error.dnsAError != nil || error.dnsAAAAError != nil {
            return ("unreachable", "cannot resolve the origin's host")
        }
        if let errno = SocketErrno.code(in: error) {
            return ("unreachable", String(cString: strerror(errno)).lowercased())
        }
        if String(describing: error).hasPrefix("DNS error") {
            return ("unreachable", "cannot resolve the origin's host")
        }
        return ("unreachable", "\(error)")
    }
}
