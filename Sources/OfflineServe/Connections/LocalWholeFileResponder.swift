import NIOCore

/// Answers a page load's commonest request, a plain `GET` of a warm package file, from the
/// connection's raw bytes, before any HTTP decoding: what `LocalImmediateResponder` would
/// answer, byte for byte and counted alike, without the decoder, the HTTP/1 ↔ HTTPTypes
/// codec, Hummingbird's connection state handler and the encoder, which are most of the
/// CPU such a request costs (`bench/serve.sh` measures it).
///
/// It sits right after `LocalConnectionGuard`, and frames requests itself only while it is
/// sure the HTTP decoder would frame them the same way (`LocalRawRequest`: a strict grammar,
/// and no field that may give a body or change the protocol). Each request so framed is
/// either answered here (`LocalServerResponder.keptWholeFile`), or passed on whole, so the
/// decoder never holds part of one. At the first bytes it does not frame (another method, a
/// field it refuses, a head split across reads) it passes them and everything after them
/// on, and leaves the pipeline.
///
/// Responses leave in request order: a request is answered here only while every request
/// passed on has been read and answered by the handlers behind (`LocalImmediateResponder`
/// counts the heads it read, and says when it is idle), and while the channel is writable.
final class LocalWholeFileResponder: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let responder: LocalServerResponder
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
    /// Told where each request answered here ends, as the HTTP layer tells it for the others.
    private var connectionGuard: LocalConnectionGuard?

    init(responder: LocalServerResponder, limits: LocalRawRequest.Limits, memo: LocalWholeFileMemo) {
        self.responder = responder
        self.limits = limits
        self.memo = memo
    }

    func handlerAdded(context: ChannelHandlerContext) {
        connectionGuard = try? context.pipeline.syncOperations.handler(type: LocalConnectionGuard.self)
    }

    /// Called by `LocalImmediateResponder` once it is in the pipeline.
    func follow(_ handler: LocalImmediateResponder) {
        behind = handler
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = unwrapInboundIn(data)
        while bytes.readableBytes > 0 {
            let parse = bytes.withUnsafeReadableBytes { LocalRawRequest.parse($0, limits: limits) }
            guard case .request(let request) = parse else {
                // From here on the HTTP decoder frames every request.
                flush(context)
                context.fireChannelRead(wrapInboundOut(bytes))
                context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
                return
            }
            if answer(request, in: bytes, context: context) {
                bytes.moveReaderIndex(forwardBy: request.length)
                connectionGuard?.requestRead()
            } else {
                passed += 1
                context.fireChannelRead(wrapInboundOut(bytes.readSlice(length: request.length)!))
            }
        }
    }

    /// Whether every request passed on was read and answered behind (so none, before the
    /// HTTP pipeline is built).
    private var isIdleBehind: Bool {
        guard let behind else { return passed == 0 }
        return behind.headsRead == passed && behind.isIdle
    }

    /// Writes the response to `request` (at the start of `bytes`) when it is a plain `GET`
    /// of a warm file and nothing passed on is still owed an answer.
    private func answer(_ request: LocalRawRequest, in bytes: ByteBuffer, context: ChannelHandlerContext) -> Bool {
        guard request.isGet, request.plain, let hostRange = request.host, context.channel.isWritable, isIdleBehind else { return false }
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
        let answer: LocalServerResponder.WholeFileAnswer
        let kept = memo.answer(host: host, path: path, generation: generation)
        if let kept {
            answer = kept
        } else {
            guard let made = responder.keptWholeFile(path, authority: authority, generation: generation) else { return false }
            memo.keep(made, host: host, path: path, generation: generation)
            answer = made
        }
        responder.count(answer, path: path, repeated: kept != nil)
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
        return true
    }

    private func flush(_ context: ChannelHandlerContext) {
        guard unflushed else { return }
        unflushed = false
        context.flush()
    }

    /// A graceful shutdown closes a connection no request is owed an answer on: the
    /// connection state handler does once it is built, but while every request was
    /// answered here (or none came) there is none yet.
    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is ChannelShouldQuiesceEvent, passed == 0 {
            flush(context)
            context.close(promise: nil)
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        flush(context)
        context.fireChannelReadComplete()
    }
}
