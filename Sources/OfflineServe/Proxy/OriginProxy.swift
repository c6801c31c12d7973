import AsyncHTTPClient
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
/// and streams the answer back (`docs/PROTOCOL.md`, "Mirrored origins", "Forwarding").
///
/// The method, the path and query, the headers (see `ForwardedHeaders`) and the body go
/// to the origin as they came, the body streamed with its framing (`Content-Length`, or
/// chunked); the origin's status, headers and body come back the same way, streamed
/// with backpressure, so neither body is ever held whole in memory. Redirects are
/// passed to the page (their `Location` moved to the mirror), never followed here, and
/// nothing is decompressed.
///
/// An origin that cannot be reached (refused, unresolvable, no connection within the
/// connect timeout, no byte of an answer within the read timeout) gets a 502 with a
/// one-line text reason. A response the origin cuts off after it began is cut off for
/// the page too (the connection is closed), never ended as if complete.
///
/// The responder decides *what* is forwarded (only origins an active whitelist names);
/// the proxy decides *how*.
package struct OriginProxy: Sendable {
    /// Timeouts and pool size for the connections to origins.
    package struct Configuration: Sendable, Equatable {
        /// A connection to the origin must be made within this time (refused fails at once).
        package var connectTimeout: Duration
        /// The origin must send something within this time whenever the proxy waits for it.
        package var readTimeout: Duration
        /// Connections kept per origin (the pool's soft limit).
        package var connectionsPerOrigin: Int

        package init(connectTimeout: Duration = .seconds(5), readTimeout: Duration = .seconds(60), connectionsPerOrigin: Int = 64) {
            self.connectTimeout = connectTimeout
            self.readTimeout = readTimeout
            self.connectionsPerOrigin = connectionsPerOrigin
        }
    }

    /// The timeouts, also those of forwards made on the event loop (`OriginExchange`).
    package let configuration: Configuration
    private let client: HTTPClient
    private let ownsClient: Bool
    private let metrics: LocalServerMetrics?

    /// A proxy over the process's shared client (default configuration), which lives as
    /// long as the process: nothing to shut down.
    package init(metrics: LocalServerMetrics? = nil) {
        self.configuration = Configuration()
        self.client = Self.shared
        self.ownsClient = false
        self.metrics = metrics
    }

    /// A proxy with a client of its own; call ``shutdown()`` when the server stops.
    package init(configuration: Configuration, metrics: LocalServerMetrics? = nil) {
        self.configuration = configuration
        self.client = Self.makeClient(configuration)
        self.ownsClient = true
        self.metrics = metrics
    }

    /// Closes the connections of a proxy made with `init(configuration:)`; a no-op for the shared client.
    package func shutdown() async {
        guard ownsClient else { return }
        try? await client.shutdown()
    }

    /// One client for the whole process, made on first use and never shut down.
    private static let shared = makeClient(Configuration())

    private static func makeClient(_ configuration: Configuration) -> HTTPClient {
        var settings = HTTPClient.Configuration(
            redirectConfiguration: .disallow,
            timeout: .init(connect: .init(configuration.connectTimeout), read: .init(configuration.readTimeout)),
            connectionPool: .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: configuration.connectionsPerOrigin),
            decompression: .disabled)
        settings.httpVersion = .http1Only
        // A refused connection must fail at once, not be retried until the connect timeout.
        settings.connectionPool.retryConnectionEstablishment = false
        return HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: settings)
    }

    /// Forwards `request` to `origin` (the request arrived on `origin.mirrorHost`, on
    /// the server's port `servePort`). `isMirrored` says which other origins are
    /// mirrored, for rewriting `Location` headers that point at them.
    package func forward(
        _ request: Request, to origin: MirrorOrigin, servePort: Int,
        isMirrored: @escaping @Sendable (MirrorOrigin) -> Bool
    ) async -> Response {
        let name = origin.origin
        var upstream = HTTPClientRequest(url: name + (request.head.path ?? "/"))
        upstream.method = HTTPMethod(rawValue: request.method.rawValue)
        upstream.headers = ForwardedHeaders.request(request.headers, servePort: servePort)
        let upload = UploadProgress()
        let forwardedBody = ForwardedRequestBody(body: request.body, progress: upload)
        if let length = request.headers[.contentLength].flatMap({ Int64($0.trimmingWhitespace()) }) {
            upstream.body = .stream(forwardedBody, length: .known(length))
        } else if request.headers[.transferEncoding] != nil {
            upstream.body = .stream(forwardedBody, length: .unknown)
        }
        let answer: HTTPClientResponse
        do {
            // No overall deadline: a long upload or download may take as long as it
            // needs while bytes keep moving; the read timeout catches a silent origin.
            answer = try await client.execute(upstream, deadline: .distantFuture)
        } catch {
            let (reason, why) = Self.describe(error)
            metrics?.recordOriginFailure(origin: name, reason: reason)
            let text = ByteBuffer(string: "offline-agent: cannot reach \(name): \(why)\n")
            var response = Response(
                status: .badGateway,
                body: ResponseBody(contentLength: text.readableBytes) { writer in
                    try await writer.write(text)
                    try await writer.finish(nil)
                    try await Self.closeIfUploading(upload)
                })
            response.headers[.contentType] = "text/plain; charset=utf-8"
            response.headers[.cacheControl] = "no-store"
            return response
        }
        metrics?.recordForwarded(origin: name, status: Int(answer.status.code))
        let headers = ForwardedHeaders.responseFields(answer.headers, origin: origin, servePort: servePort, isMirrored: isMirrored)
        let metrics = self.metrics
        let body = ResponseBody { writer in
            do {
                for try await chunk in answer.body { try await writer.write(chunk) }
            } catch {
                // Thrown out of the body, the error makes the server close the
                // connection: the page sees a broken response, not a short one.
                metrics?.recordOriginFailure(origin: name, reason: "broken")
                throw error
            }
            try await writer.finish(nil)
            try await Self.closeIfUploading(upload)
        }
        return Response(status: .init(code: Int(answer.status.code), reasonPhrase: answer.status.reasonPhrase), headers: headers, body: body)
    }

    /// Thrown after a complete response, so the server closes the connection rather than
    /// read its next request while the upload may still be reading the same stream.
    struct UnfinishedUpload: Error {}

    static func closeIfUploading(_ upload: UploadProgress) async throws {
        if await !upload.settled() { throw UnfinishedUpload() }
    }

    /// The metrics reason and the one-line explanation of a failed request.
    static func describe(_ error: any Error) -> (reason: String, why: String) {
        if let error = error as? HTTPClientError {
            switch error {
            case .connectTimeout: return ("timeout", "no connection within the connect timeout")
            case .readTimeout: return ("timeout", "no answer within the read timeout")
            case .remoteConnectionClosed: return ("unreachable", "the origin closed the connection before answering")
            default: break
            }
        }
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
