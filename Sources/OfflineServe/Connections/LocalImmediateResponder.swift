import FoundationEssentials
import HTTPTypes
import Hummingbird
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1
import OfflineAgent
import OfflineHTTP

/// Answers on the event loop the requests memory alone answers
/// (`LocalServerResponder.immediateAnswer(to:authority:)`: a warm package file), forwards there the
/// requests a mirror host sends to its origin (`OriginExchange`), and passes every other
/// request on, whole, to Hummingbird's responder behind it.
///
/// Most of what a page loads is such a file, and each one answered here skips the task,
/// the two hops between the event loop and Swift's cooperative pool, and the async
/// channel's buffering on both sides (`bench/serve.sh` measures the difference).
///
/// It sits after the HTTP codec and Hummingbird's connection state handler (which so
/// sees every request and response, for keep-alive and graceful shutdown) and before
/// the async channel. Responses leave in request order: a request is answered here only
/// while no request passed on is still owed its response (counted down at each response's
/// `.end`) or forwarded, and only while the channel is writable, so a client that sends without
/// reading meets the async channel's backpressure. After a request with
/// `Connection: close` the output is shut down, as Hummingbird does, and whatever the
/// client sends after it is dropped.
final class LocalImmediateResponder: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private let responder: LocalServerResponder
    /// Requests passed on whose response has not ended yet.
    private var owed = 0
    /// The request being read was answered here: its body, if any, is dropped up to its end.
    private var answered = false
    /// Responses written since the last flush (flushed when the read burst ends).
    private var unflushed = false
    /// A request answered here asked to close the connection: nothing more is read.
    private var closing = false
    private var date = LocalResponseDate()
    /// The request being forwarded to its origin, from its head to its response's end.
    private var exchange: OriginExchange?
    /// The forwarded request asked to close the connection after its response.
    private var closeAfterExchange = false
    /// Parts of the requests after a forwarded one, read before its response ended (a
    /// pipelining client): handled, in order, once it has.
    private var waiting: [HTTPRequestPart] = []
    /// A read the exchange held back (its origin connection was not taking the body).
    private var readHeld = false
    /// The client ended its side (half-close) while a forwarded request or requests read
    /// behind it were unanswered: passed on once they are, or the server would close the
    /// connection before answering them.
    private var inputClosedHeld = false
    private var pool: OriginConnectionPool?
    /// Told where each request ends, so a body is never timed as a head.
    private var connectionGuard: LocalConnectionGuard?
    /// The last request's `Host`, parsed: a connection's requests name the same one.
    private var authority: LocalHostAuthority?
    /// The HTTP/1 ↔ HTTPTypes codec's context, below which the heads and bodies made in
    /// HTTP/1 form (a kept file's, a forwarded answer's) are written: neither the codec nor
    /// the connection state handler above it keeps anything from them. Set once added, as
    /// `LocalServerChannel` always adds the codec first.
    private var http1: ChannelHandlerContext!
    /// This handler's context, for the answers an exchange writes (`OriginExchangePage`).
    private var context: ChannelHandlerContext?

    /// Request heads read, of all those the connection sent (`LocalRawResponder`
    /// counts those it passed on).
    private(set) var headsRead = 0
    /// A request's head was read and its end not yet.
    private var readingRequest = false

    init(responder: LocalServerResponder) {
        self.responder = responder
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        pool = .of(context.eventLoop)
        (try? context.pipeline.syncOperations.handler(type: LocalRawResponder.self))?.follow(self)
        connectionGuard = try? context.pipeline.syncOperations.handler(type: LocalConnectionGuard.self)
        do {
            http1 = try context.pipeline.syncOperations.context(handlerType: HTTP1ToHTTPServerCodec.self)
        } catch {
            preconditionFailure("LocalImmediateResponder needs HTTP1ToHTTPServerCodec before it: \(error)")
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let part = unwrapInboundIn(data)
        switch part {
        case .head:
            headsRead += 1
            readingRequest = true
        case .body:
            break
        case .end:
            readingRequest = false
            connectionGuard?.requestRead()
        }
        handle(part, context: context)
    }

    /// Every request read so far is read to its end and answered (its response written,
    /// if not yet flushed), and the connection goes on: a response written below this
    /// handler now comes after all of theirs (`LocalRawResponder`).
    var isIdle: Bool {
        !readingRequest && owed == 0 && exchange == nil && waiting.isEmpty && !closing && !inputClosedHeld
    }

    private func handle(_ part: HTTPRequestPart, context: ChannelHandlerContext) {
        guard !closing else { return }
        if let exchange {
            if exchange.requestRead {
                waiting.append(part)
            } else {
                exchange.pageRead(part)
            }
            return
        }
        switch part {
        case .head(let head):
            let request = Request(head: head, body: RequestBody(buffer: ByteBuffer()))
            let authority = LocalHostAuthority.of(head.authority, known: authority)
            self.authority = authority
            if owed == 0, context.channel.isWritable, let answer = responder.immediateAnswer(to: request, authority: authority) {
                answered = true
                switch answer {
                case .response(let response):
                    write(response, context: context)
                    if Self.asksToClose(head) { close(context) }
                case .forward(let origin, let snapshot, let reason):
                    answered = false
                    forward(request, to: origin, servePort: authority.port, mirrors: snapshot, reason: reason, context: context)
                }
                return
            }
            answered = false
            owed += 1
            context.fireChannelRead(wrapInboundOut(part))
        case .body:
            if !answered { context.fireChannelRead(wrapInboundOut(part)) }
        case .end:
            if answered {
                answered = false
            } else {
                context.fireChannelRead(wrapInboundOut(part))
            }
        }
    }

    /// Ends the connection after the responses written so far.
    private func close(_ context: ChannelHandlerContext) {
        closing = true
        unflushed = false
        context.flush()
        context.close(mode: .output, promise: nil)
    }

    private func forward(
        _ request: Request, to origin: MirrorOrigin, servePort: Int, mirrors: LocalMirrors.Snapshot, reason: FallbackReason?,
        context: ChannelHandlerContext
    ) {
        let origins = mirrors.origins
        closeAfterExchange = Self.asksToClose(request.head)
        let fields = request.headers
        let head = ForwardedHeaders.requestHead(
            HTTPMethod(rawValue: request.method.rawValue), target: request.head.path ?? "/",
            headers: ForwardedHeaders.request(fields, servePort: servePort), origin: origin,
            contentLength: fields[.contentLength], chunked: fields[.transferEncoding] != nil)
        let exchange = OriginExchange(
            head, to: origin, servePort: servePort,
            fallback: reason, isMirrored: { origins.contains($0) }, page: self, pool: pool ?? .of(context.eventLoop),
            configuration: responder.proxy.configuration, metrics: responder.metrics,
            onEnd: { [unowned self] ending in exchangeEnded(ending, context: context) },
            onOriginWritable: { [unowned self] in resumeReading(context) })
        self.exchange = exchange
        exchange.start(duringRead: true)
    }

    private func exchangeEnded(_ ending: OriginExchange.Ending, context: ChannelHandlerContext) {
        exchange = nil
        switch ending {
        case .broken:
            closing = true
            waiting.removeAll()
            context.close(promise: nil)
            return
        case .unreadBody:
            // The rest of the body is still on its way: dropped, the answer written, then the end.
            waiting.removeAll()
            return close(context)
        case .complete:
            if closeAfterExchange { return close(context) }
        }
        // The requests read meanwhile, in order; one of them may start another exchange,
        // and the parts after it wait again. Then what a read burst's end does: the async
        // channel hands what it buffered to Hummingbird only then.
        let parts = waiting
        waiting.removeAll()
        if !parts.isEmpty {
            for part in parts { handle(part, context: context) }
            channelReadComplete(context: context)
        } else if unflushed {
            unflushed = false
            context.flush()
        }
        if inputClosedHeld, exchange == nil, waiting.isEmpty, !closing {
            inputClosedHeld = false
            context.fireUserInboundEventTriggered(ChannelEvent.inputClosed)
        }
        resumeReading(context)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? ChannelEvent, case .inputClosed = event, exchange != nil || !waiting.isEmpty {
            inputClosedHeld = true
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    /// Whether the request asks to end the connection after its response (a `close`
    /// token in `Connection`, any case).
    static func asksToClose(_ head: HTTPRequest) -> Bool {
        head.headerFields[values: .connection].contains { value in
            value.split(separator: ",").contains { $0.trimmingWhitespace().lowercased() == "close" }
        }
    }

    /// While a request is forwarded, its body is read only as fast as its origin takes it,
    /// and what a pipelining client sends after it (at most one read burst, `waiting`)
    /// waits until its response has ended. Reading goes on otherwise, so a client that
    /// waits for each answer costs no change of the socket's epoll interest per request.
    private var holdsReads: Bool {
        !waiting.isEmpty || !(exchange?.mayReadPage ?? true)
    }

    private func resumeReading(_ context: ChannelHandlerContext) {
        guard readHeld, !holdsReads else { return }
        readHeld = false
        context.read()
    }

    func read(context: ChannelHandlerContext) {
        if holdsReads {
            readHeld = true
            return
        }
        context.read()
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        exchange?.pageReadComplete()
        if unflushed {
            unflushed = false
            context.flush()
        }
        context.fireChannelReadComplete()
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { exchange?.pageWritable() }
        context.fireChannelWritabilityChanged()
    }

    func channelInactive(context: ChannelHandlerContext) {
        exchange?.pageClosed()
        exchange = nil
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        exchange?.pageClosed()
        exchange = nil
        self.context = nil
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = unwrapOutboundIn(data), owed > 0 { owed -= 1 }
        context.write(data, promise: promise)
    }

    /// Head and body below the codec (they are HTTP/1 already); the end through it, for
    /// the connection state handler's count.
    private func write(_ response: LocalServerResponder.ImmediateResponse, context: ChannelHandlerContext) {
        var head = response.head
        // What Hummingbird's application adds to every response it writes.
        head.headers.add(name: "Date", value: date.current())
        http1.write(NIOAny(HTTPServerResponsePart.head(head)), promise: nil)
        if let body = response.body { http1.write(NIOAny(HTTPServerResponsePart.body(.byteBuffer(body))), promise: nil) }
        context.write(wrapOutboundOut(.end(nil)), promise: nil)
        unflushed = true
    }
}

extension LocalImmediateResponder: OriginExchangePage {
    var eventLoop: any EventLoop { http1.eventLoop }

    var isWritable: Bool { http1.channel.isWritable }

    /// Head and body below the codec (they are HTTP/1 already); the end through it, for
    /// the connection state handler's count of answered requests.
    func writeAnswerHead(_ status: HTTPResponseStatus, fields: ((String, String) -> Void) -> Void) {
        var headers = HTTPHeaders()
        fields { headers.add(name: $0, value: $1) }
        http1.write(NIOAny(HTTPServerResponsePart.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))), promise: nil)
    }

    func writeAnswerBody(_ bytes: ByteBuffer) {
        http1.write(NIOAny(HTTPServerResponsePart.body(.byteBuffer(bytes))), promise: nil)
    }

    func writeAnswerEnd() {
        context?.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
    }

    func flushAnswer() {
        context?.flush()
    }
}
