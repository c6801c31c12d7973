import NIOCore
import NIOHTTP1
import OfflineAgent

/// A request framed from the raw bytes that its mirror host sends to the origin: the same
/// `OriginExchange` as a decoded one (`LocalImmediateResponder`), its head made from the
/// bytes (`ForwardedHeaders`), its body (all of it read already) given at once, and the
/// origin's answer encoded here as NIO's HTTP/1 encoder would encode it.
extension LocalRawResponder {
    /// Starts forwarding `request` (at the start of `bytes`) to `origin`.
    func forward(
        _ request: LocalRawRequest, in bytes: ByteBuffer, to origin: MirrorOrigin, servePort: Int, mirrors: LocalMirrors.Snapshot,
        reason: FallbackReason?, context: ChannelHandlerContext
    ) {
        let head = bytes.withUnsafeReadableBytes { raw in
            return ForwardedHeaders.requestHead(
                HTTPMethod(rawValue: request.method.rawValue),
                target: String(decoding: UnsafeRawBufferPointer(rebasing: raw[request.target]), as: UTF8.self),
                headers: ForwardedHeaders.request(request, in: raw, servePort: servePort), origin: origin,
                contentLength: request.hasLength ? String(request.body.count) : nil, chunked: false)
        }
        answerBodiless = request.method == .head
        let origins = mirrors.origins
        let exchange = OriginExchange(
            head, to: origin, servePort: servePort, fallback: reason, isMirrored: { origins.contains($0) }, page: self,
            pool: pool(context), configuration: responder.proxy.configuration, metrics: responder.metrics,
            onEnd: { [unowned self] ending in exchangeEnded(ending, context: context) },
            // The whole request was read: nothing of the page waits for the origin connection.
            onOriginWritable: {})
        self.exchange = exchange
        exchange.start(duringRead: reading)
        if !request.body.isEmpty {
            exchange.pageRead(.body(bytes.getSlice(at: bytes.readerIndex + request.headLength, length: request.body.count)!))
        }
        exchange.pageRead(.end(nil))
        // Outside a read burst nothing else flushes the request to the origin.
        if !reading { exchange.pageReadComplete() }
    }

    /// The event loop's origin connections, looked up once per page connection.
    private func pool(_ context: ChannelHandlerContext) -> OriginConnectionPool {
        if let originPool { return originPool }
        let pool = OriginConnectionPool.of(context.eventLoop)
        originPool = pool
        return pool
    }

    private func exchangeEnded(_ ending: OriginExchange.Ending, context: ChannelHandlerContext) {
        exchange = nil
        switch ending {
        case .broken:
            // Cut off after it began: the page sees a broken response, never a short one.
            waiting = nil
            context.close(promise: nil)
            return
        case .unreadBody, .complete:
            // `.unreadBody` cannot come: the whole body was given at the start.
            break
        }
        // An exchange started and ended while the held bytes are framed: that framing goes on.
        guard !drainingWaiting else { return }
        if let held = waiting {
            let guardTold = waitingToldGuard
            waiting = nil
            waitingToldGuard = false
            drainingWaiting = true
            frame(held, guardTold: guardTold, context: context)
            drainingWaiting = false
            // Removed by `frame` (it left the pipeline, and passed on what was held): done.
            guard self.context != nil else { return }
            if !reading { channelReadComplete(context: context) }
        }
        if readHeld, waiting == nil {
            readHeld = false
            // From the pipeline's tail, so a handler behind that holds reads now holds this one.
            context.channel.read()
        }
        // Held until every request read before them was answered (another forward may run now).
        guard exchange == nil, waiting == nil else { return }
        if quiesceHeld {
            quiesceHeld = false
            userInboundEventTriggered(context: context, event: ChannelShouldQuiesceEvent())
        }
        if inputClosedHeld, self.context != nil {
            inputClosedHeld = false
            userInboundEventTriggered(context: context, event: ChannelEvent.inputClosed)
        }
    }
}

extension LocalRawResponder: OriginExchangePage {
    var eventLoop: any EventLoop { context!.eventLoop }

    var isWritable: Bool { context?.channel.isWritable ?? false }

    /// Encodes the head as NIO's `HTTPResponseEncoder` does: a body framed by its
    /// `Content-Length`, else chunked (`transfer-encoding: chunked` last), no framing field
    /// for a status without a body (1xx, 204, 304), and no body sent for a `HEAD` (its
    /// framing fields kept).
    func writeAnswerHead(_ status: HTTPResponseStatus, fields: ((String, String) -> Void) -> Void) {
        guard let context else { return }
        let hasBody = status.mayHaveResponseBody
        var buffer = context.channel.allocator.buffer(capacity: 512)
        buffer.writeStaticString("HTTP/1.1 ")
        buffer.writeString(String(status.code))
        buffer.writeStaticString(" ")
        buffer.writeString(status.reasonPhrase)
        buffer.writeStaticString("\r\n")
        var hasLength = false
        fields { name, value in
            // Only the framing fields' lengths need a closer look.
            let count = name.utf8.count
            if count == 14 || count == 17 {
                switch ForwardedHeaders.name(name) {
                case .contentLength:
                    guard hasBody else { return }
                    hasLength = true
                case .hopByHop:
                    // `Transfer-Encoding` (the only one of 17 bytes): framed here.
                    return
                default:
                    break
                }
            }
            buffer.writeString(name)
            buffer.writeStaticString(": ")
            buffer.writeString(value)
            buffer.writeStaticString("\r\n")
        }
        answerChunked = hasBody && !hasLength
        if answerChunked { buffer.writeStaticString("transfer-encoding: chunked\r\n") }
        if answerBodiless { answerChunked = false }
        buffer.writeStaticString("\r\n")
        context.write(wrapOutboundOut(buffer), promise: nil)
    }

    func writeAnswerBody(_ bytes: ByteBuffer) {
        guard let context, !answerBodiless, bytes.readableBytes > 0 else { return }
        guard answerChunked else { return context.write(wrapOutboundOut(bytes), promise: nil) }
        var size = context.channel.allocator.buffer(capacity: 16)
        size.writeString(String(bytes.readableBytes, radix: 16))
        size.writeStaticString("\r\n")
        context.write(wrapOutboundOut(size), promise: nil)
        context.write(wrapOutboundOut(bytes), promise: nil)
        context.write(wrapOutboundOut(ByteBuffer(string: "\r\n")), promise: nil)
    }

    func writeAnswerEnd() {
        guard let context else { return }
        if answerChunked {
            context.write(wrapOutboundOut(ByteBuffer(string: "0\r\n\r\n")), promise: nil)
            answerChunked = false
        }
        answerBodiless = false
        context.flush()
    }

    func flushAnswer() {
        context?.flush()
    }
}
