import NIOCore
import NIOHTTP1

/// Where each request and response of a `serve` connection begins and ends, right after
/// NIO's HTTP/1 decoder (the one grammar `serve` reads requests with):
///
/// - a request the decoder refuses (duplicate or conflicting framing, obs-fold, bare LF,
///   NUL, a malformed request line or field, …) gets `400`, a head over the decoder's
///   limits (size or field count) `431`, with `Connection: close`, and the connection
///   closes at once (after the answers owed to the requests before it);
/// - after the answer to an HTTP/1.0 request without keep-alive, or to a request whose
///   `Connection` has the `close` token (any case), or an answer that has it (every
///   refusal), the connection closes at once; the answer to an HTTP/1.0 request without
///   keep-alive is HTTP/1.0, so it is never chunked;
/// - a request whose body the decoder refuses (a chunk size that is not hex or overflows, a
///   chunk without its CRLF, a malformed extension or trailer) or that the client cuts off
///   (its side ends before the body's end) makes the body's stream fail with
///   `BrokenBody`, never end: whoever reads it sees no complete request (a forward aborts
///   its origin connection without the last chunk, `OriginExchange.pageBodyBroken`);
/// - the connection guard learns where each request ends (its body is not a head), and the
///   connection limiter which connections are idle: no request read and not yet answered.
final class LocalRequestFraming: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    private let limiter: LocalConnectionLimiter
    private var connectionGuard: LocalConnectionGuard?
    /// For each request read and not yet answered, in order: its version when the connection
    /// ends with its answer.
    private var owed: [HTTPVersion?] = []
    /// A refusal waiting for the answers owed before it.
    private var refusal: LocalErrorAnswer?
    private var closing = false
    /// A request's head was read and its end not yet.
    private var readingBody = false

    /// The request body being read could not be framed to its end (`HTTPParserError`
    /// `cause`, an end of input before the body's end included).
    struct BrokenBody: Error {
        let cause: HTTPParserError
    }

    init(limiter: LocalConnectionLimiter) {
        self.limiter = limiter
    }

    /// The first answer owed has begun (its head was written).
    private var answering = false

    func handlerAdded(context: ChannelHandlerContext) {
        connectionGuard = try? context.pipeline.syncOperations.handler(type: LocalConnectionGuard.self)
        connectionGuard?.answerOwed = { [weak self] in self.map { !$0.owed.isEmpty && !$0.answering } ?? false }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        connectionGuard?.answerOwed = { false }
        // An upgrade: the connection is a WebSocket from now on, never idle in the limiter's sense.
        limiter.setIdle(context.channel, false)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !closing else { return }
        switch unwrapInboundIn(data) {
        case .head(let head):
            if owed.isEmpty { limiter.setIdle(context.channel, false) }
            owed.append(Self.closes(head) ? head.version : nil)
            readingBody = true
        case .body:
            break
        case .end:
            readingBody = false
            connectionGuard?.requestRead()
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch unwrapOutboundIn(data) {
        case .head(var head):
            guard !owed.isEmpty else { break }
            answering = true
            if let version = owed[0] {
                head.version = version == .http1_0 ? .http1_0 : .http1_1
                head.headers.replaceOrAdd(name: "Connection", value: "close")
                return context.write(wrapOutboundOut(.head(head)), promise: promise)
            }
            // An answer that says it ends the connection (a refusal) does.
            if !head.isKeepAlive { owed[0] = head.version }
        case .body:
            break
        case .end:
            guard !owed.isEmpty else { break }
            answering = false
            let closes = owed.removeFirst() != nil
            if closes {
                closing = true
                return closeAfter(context.writeAndFlush(data), context: context, promise: promise)
            }
            if owed.isEmpty {
                if let refusal { return refuse(refusal, context: context, after: (data, promise)) }
                limiter.setIdle(context.channel, true)
            }
        }
        context.write(data, promise: promise)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard let error = error as? HTTPParserError else { return context.fireErrorCaught(error) }
        guard !closing else { return }
        if readingBody {
            // The body's reader learns it has no end (an end of input is also a parser error
            // here: `invalidEOFState`); passed on, the error ends the body's stream.
            readingBody = false
            context.fireErrorCaught(BrokenBody(cause: error))
        }
        // Nothing more is read from a connection whose bytes could not be framed.
        closing = true
        let answer = LocalErrorAnswer.undecodable(headerOverflow: error == .headerOverflow)
        if owed.isEmpty { refuse(answer, context: context) } else { refusal = answer }
    }

    /// Gives `answer` and closes, after `pending` (the end of the last answer owed).
    private func refuse(_ answer: LocalErrorAnswer, context: ChannelHandlerContext, after pending: (NIOAny, EventLoopPromise<Void>?)? = nil) {
        if let (data, promise) = pending { context.write(data, promise: promise) }
        answer.writeThenClose(on: context)
    }

    /// Closes the connection once `written` (the end of its last answer) has gone out: a
    /// close with writes still queued would drop them.
    private func closeAfter(_ written: EventLoopFuture<Void>, context: ChannelHandlerContext, promise: EventLoopPromise<Void>?) {
        written.assumeIsolated().whenComplete { result in
            promise?.completeWith(result)
            context.close(promise: nil)
        }
    }

    /// Whether the connection ends with the answer to `head`: HTTP/1.0 without keep-alive,
    /// or a `close` token in `Connection`, in any case (`HTTPRequestHead.isKeepAlive`).
    static func closes(_ head: HTTPRequestHead) -> Bool {
        !head.isKeepAlive
    }
}
