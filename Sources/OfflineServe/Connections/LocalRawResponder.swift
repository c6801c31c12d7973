import NIOCore

/// Takes a page's commonest requests from the connection's raw bytes, before any HTTP
/// decoding: a plain `GET` of a warm package file is answered, and a request a mirror host
/// sends to its origin is forwarded (`LocalRawResponder+Forward`), each exactly as
/// `LocalImmediateResponder` would, byte for byte and counted alike, without the decoder,
/// the HTTP/1 ↔ HTTPTypes codec, Hummingbird's connection state handler and the encoder,
/// which are most of the CPU such a request costs (`bench/serve.sh`, `bench/proxy.sh`).
///
/// It sits right after `LocalConnectionGuard`, and frames requests itself only while it is
/// sure the HTTP decoder would frame them the same way (`LocalRawRequest`: a strict grammar,
/// a body only by one `Content-Length`, all of it read, and no field that changes the
/// protocol). Each request so framed is answered here, forwarded here, or passed on whole,
/// so the decoder never holds part of one. At the first bytes it does not frame (another
/// method, a field it refuses, a head or body split across reads) it passes them and
/// everything after them on, and leaves the pipeline.
///
/// Responses leave in request order: a request is taken here only while every request
/// passed on has been read and answered by the handlers behind (`LocalImmediateResponder`
/// counts the heads it read, and says when it is idle), and while the channel is writable;
/// what a client sends while a forwarded request's answer is still coming waits here, its
/// reads held, until that answer ended.
final class LocalRawResponder: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = IOData
    typealias OutboundOut = ByteBuffer

    let responder: LocalServerResponder
    private let limits: LocalRawRequest.Limits
    /// The answers this connection's event loop made, for repeats.
    private let memo: LocalWholeFileMemo
    /// The handler behind that answers the requests passed on; nil until the HTTP
    /// pipeline is built, after the first request.
    private var behind: LocalImmediateResponder?
    /// Requests passed on whole.
    private var passed = 0
    /// Responses written since the last flush (flushed when the read burst ends).
    private var unflushed = false
    /// The last request's `Host`, parsed: a connection's requests name the same one.
    private var authority: LocalHostAuthority?
    private var date = LocalResponseDate()
    /// Told where each request taken here ends, as the HTTP layer tells it for the others.
    private var connectionGuard: LocalConnectionGuard?
    /// This handler's context while it is in the pipeline.
    var context: ChannelHandlerContext?
    /// Inside a read burst (`channelRead` … `channelReadComplete`).
    private(set) var reading = false
    /// Bytes were passed on in this read burst: the handlers behind are owed its end.
    private var passedInBurst = false

    // MARK: A forwarded request (`LocalRawResponder+Forward`)

    /// The request forwarded to its origin, from its head to its answer's end.
    var exchange: OriginExchange?
    /// Bytes read while `exchange` ran (a pipelining client): framed once its answer ended.
    var waiting: ByteBuffer?
    /// A read held back while bytes wait.
    var readHeld = false
    /// The client ended its side, or the server began a graceful stop, while `exchange`
    /// ran: passed on (or acted on) once its answer ended.
    var inputClosedHeld = false
    var quiesceHeld = false
    /// The connection guard was told the first request in `waiting` was read.
    var waitingToldGuard = false
    /// `waiting` is being framed (`exchangeEnded`): an exchange that ends meanwhile leaves
    /// what was held to that framing.
    var drainingWaiting = false
    /// How the answer being written is framed: by chunks, or with no body at all (a
    /// `HEAD`, or a status without one).
    var answerChunked = false
    var answerBodiless = false
    /// The event loop's origin connections (`OriginConnectionPool.of`), once one was needed.
    var originPool: OriginConnectionPool?

    init(responder: LocalServerResponder, limits: LocalRawRequest.Limits, memo: LocalWholeFileMemo) {
        self.responder = responder
        self.limits = limits
        self.memo = memo
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        connectionGuard = try? context.pipeline.syncOperations.handler(type: LocalConnectionGuard.self)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        exchange?.pageClosed()
        exchange = nil
        self.context = nil
    }

    /// Called by `LocalImmediateResponder` once it is in the pipeline.
    func follow(_ handler: LocalImmediateResponder) {
        behind = handler
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        reading = true
        frame(unwrapInboundIn(data), context: context)
    }

    /// Takes, forwards or passes on each request at the start of `bytes`. `guardTold`: the
    /// connection guard was told already that the first one was read (`holdForExchange`).
    func frame(_ bytes: ByteBuffer, guardTold: Bool = false, context: ChannelHandlerContext) {
        var bytes = bytes
        var guardTold = guardTold
        while bytes.readableBytes > 0 {
            guard exchange == nil else {
                holdForExchange(bytes)
                return
            }
            let parse = bytes.withUnsafeReadableBytes { LocalRawRequest.parse($0, limits: limits) }
            guard case .request(let request) = parse else {
                // From here on the HTTP decoder frames every request.
                leave(passing: bytes, context: context)
                return
            }
            if take(request, in: bytes, context: context) {
                bytes.moveReaderIndex(forwardBy: request.length)
                if !guardTold { connectionGuard?.requestRead() }
            } else {
                passed += 1
                passedInBurst = true
                context.fireChannelRead(wrapInboundOut(bytes.readSlice(length: request.length)!))
            }
            guardTold = false
        }
    }

    /// Keeps `bytes` until the forwarded request's answer ended, in order. A whole request
    /// among them is read as far as the connection guard is concerned (as the decoder would
    /// say at once): its wait is the origin's to bound, not timed as a body being sent.
    private func holdForExchange(_ bytes: ByteBuffer) {
        if waiting == nil { waiting = bytes } else { waiting!.writeImmutableBuffer(bytes) }
        guard !waitingToldGuard, case .request = waiting!.withUnsafeReadableBytes({ LocalRawRequest.parse($0, limits: limits) })
        else { return }
        waitingToldGuard = true
        connectionGuard?.requestRead()
    }

    /// Passes `bytes` and everything after them to the decoder, and steps out.
    private func leave(passing bytes: ByteBuffer, context: ChannelHandlerContext) {
        flush(context)
        context.fireChannelRead(wrapInboundOut(bytes))
        // Outside a read burst (bytes that waited for a forwarded answer), the burst's end is
        // this handler's to send: a context fires nothing once removed.
        if !reading { context.fireChannelReadComplete() }
        // What was held for a forwarded answer goes on behind these bytes, to the handlers
        // that answer them from now on.
        if quiesceHeld {
            quiesceHeld = false
            context.fireUserInboundEventTriggered(ChannelShouldQuiesceEvent())
        }
        if inputClosedHeld {
            inputClosedHeld = false
            context.fireUserInboundEventTriggered(ChannelEvent.inputClosed)
        }
        let readAgain = readHeld
        readHeld = false
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
        // From the pipeline's tail: a handler behind that now holds reads (a forward whose
        // origin is not taking its body yet) holds this one too.
        if readAgain { context.channel.read() }
    }

    /// Whether every request passed on was read and answered behind (so none, before the
    /// HTTP pipeline is built).
    private var isIdleBehind: Bool {
        guard let behind else { return passed == 0 }
        return behind.headsRead == passed && behind.isIdle
    }

    /// Answers or forwards `request` (at the start of `bytes`) when nothing passed on is
    /// still owed an answer: false when it is the decoder's.
    private func take(_ request: LocalRawRequest, in bytes: ByteBuffer, context: ChannelHandlerContext) -> Bool {
        guard let hostRange = request.host, context.channel.isWritable, isIdleBehind else { return false }
        let (authority, path) = bytes.withUnsafeReadableBytes { raw in
            let host = UnsafeRawBufferPointer(rebasing: raw[hostRange])
            let authority = self.authority.flatMap { $0.value?.utf8.elementsEqual(host) == true ? $0 : nil }
                ?? LocalHostAuthority(String(decoding: host, as: UTF8.self))
            return (authority, String(decoding: UnsafeRawBufferPointer(rebasing: raw[request.path]), as: UTF8.self))
        }
        self.authority = authority
        // One look at the store's watch for the whole request (`LocalStoreWatch`).
        let generation = responder.versions.watch.generation()
        let host = authority.value ?? ""
        if request.isGet, request.plain, let kept = memo.answer(host: host, path: path, generation: generation) {
            responder.count(kept, path: path, repeated: true)
            write(kept, context: context)
            return true
        }
        let route = responder.immediateRoute(
            path, isFileRequest: request.method == .get || request.method == .head, upgrade: false,
            host: responder.hostName(authority, generation: generation), generation: generation)
        switch route {
        case .file?:
            guard request.isGet, request.plain, let made = responder.keptWholeFile(route, generation: generation) else { return false }
            memo.keep(made, host: host, path: path, generation: generation)
            responder.count(made, path: path, repeated: false)
            write(made, context: context)
            return true
        case .forward(let origin, let snapshot, let fallback)?:
            guard request.keepsAlive else { return false }
            if let fallback { responder.metrics.recordFallback(app: fallback.app, reason: fallback.reason) }
            forward(request, in: bytes, to: origin, servePort: authority.port, mirrors: snapshot, reason: fallback?.reason, context: context)
            return true
        case nil:
            return false
        }
    }

    /// Writes a whole-file answer: its kept head, the source and the date, and the bytes.
    private func write(_ answer: LocalServerResponder.WholeFileAnswer, context: ChannelHandlerContext) {
        let content = answer.content
        var head = context.channel.allocator.buffer(capacity: content.wholeHead.readableBytes + 72)
        head.writeImmutableBuffer(content.wholeHead)
        if answer.mirrored { head.writeStaticString("X-Offline-Source: package\r\n") }
        head.writeStaticString("Date: ")
        head.writeString(date.current())
        head.writeStaticString("\r\n\r\n")
        context.write(wrapOutboundOut(head), promise: nil)
        context.write(wrapOutboundOut(content.body), promise: nil)
        unflushed = true
    }

    func flush(_ context: ChannelHandlerContext) {
        guard unflushed else { return }
        unflushed = false
        context.flush()
    }

    /// A graceful shutdown, or the client's end of input, while every request was taken
    /// here (or none came) is this handler's to act on: the connection state handler would
    /// once it is built, but there is none yet, and NIO's upgrade handler, still waiting for
    /// a first request, would close at once and drop answers not yet written. A forwarded
    /// answer still coming, and the requests read behind it, are let end first.
    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is ChannelShouldQuiesceEvent {
            if exchange != nil || waiting != nil {
                quiesceHeld = true
                return
            }
            if passed == 0 { return closeAfterWrites(context) }
        }
        if let event = event as? ChannelEvent, case .inputClosed = event {
            if exchange != nil || waiting != nil {
                inputClosedHeld = true
                return
            }
            if passed == 0 { return closeAfterWrites(context) }
        }
        context.fireUserInboundEventTriggered(event)
    }

    /// Closes the connection once every answer written was sent (a close cancels what is
    /// still queued; the guard's idle timeout bounds a client that stops reading).
    private func closeAfterWrites(_ context: ChannelHandlerContext) {
        unflushed = false
        let sent = context.eventLoop.makePromise(of: Void.self)
        // Written after all the others, so it completes once they have been sent.
        context.writeAndFlush(wrapOutboundOut(context.channel.allocator.buffer(capacity: 0)), promise: sent)
        sent.futureResult.assumeIsolated().whenComplete { _ in context.close(promise: nil) }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        reading = false
        exchange?.pageReadComplete()
        flush(context)
        // A burst whose requests were all taken here is nothing to the handlers behind (the
        // decoder, the async channel): its end is not sent through them.
        if passedInBurst {
            passedInBurst = false
            context.fireChannelReadComplete()
        }
    }

    func read(context: ChannelHandlerContext) {
        // Bytes wait for a forwarded answer: no more until it ended.
        if waiting != nil {
            readHeld = true
            return
        }
        context.read()
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { exchange?.pageWritable() }
        context.fireChannelWritabilityChanged()
    }

    func channelInactive(context: ChannelHandlerContext) {
        exchange?.pageClosed()
        exchange = nil
        waiting = nil
        context.fireChannelInactive()
    }
}
