import FoundationEssentials
import HTTPTypes
import Hummingbird
import NIOCore
import NIOHTTPTypes
import OfflineHTTP
#if canImport(Glibc)
import Glibc
#endif

/// Answers on the event loop the requests memory alone answers
/// (`LocalServerResponder.immediateResponse(to:)`: a warm package file), and passes every
/// other request on, whole, to Hummingbird's responder behind it.
///
/// Most of what a page loads is such a file, and each one answered here skips the task,
/// the two hops between the event loop and Swift's cooperative pool, and the async
/// channel's buffering on both sides (`bench/serve.sh` measures the difference).
///
/// It sits after the HTTP codec and Hummingbird's connection state handler (which so
/// sees every request and response, for keep-alive and graceful shutdown) and before
/// the async channel. Responses leave in request order: a request is answered here only
/// while no request passed on is still owed its response (counted down at each response's
/// `.end`), and only while the channel is writable, so a client that sends without
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
    /// The `Date` value and the second it is for.
    private var date = (second: -1, text: "")

    init(responder: LocalServerResponder) {
        self.responder = responder
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !closing else { return }
        switch unwrapInboundIn(data) {
        case .head(let head):
            if owed == 0, context.channel.isWritable,
               let response = responder.immediateResponse(to: Request(head: head, body: RequestBody(buffer: ByteBuffer()))) {
                answered = true
                write(response, context: context)
                // Hummingbird's own test: the connection ends after this response.
                if head.headerFields[.connection] == "close" {
                    closing = true
                    unflushed = false
                    context.flush()
                    context.close(mode: .output, promise: nil)
                }
                return
            }
            answered = false
            owed += 1
            context.fireChannelRead(data)
        case .body:
            if !answered { context.fireChannelRead(data) }
        case .end:
            if answered {
                answered = false
            } else {
                context.fireChannelRead(data)
            }
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if unflushed {
            unflushed = false
            context.flush()
        }
        context.fireChannelReadComplete()
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = unwrapOutboundIn(data), owed > 0 { owed -= 1 }
        context.write(data, promise: promise)
    }

    private func write(_ response: LocalServerResponder.ImmediateResponse, context: ChannelHandlerContext) {
        var head = response.head
        // What Hummingbird's application adds to every response it writes.
        head.headerFields[.date] = currentDate()
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        if let body = response.body { context.write(wrapOutboundOut(.body(body)), promise: nil) }
        context.write(wrapOutboundOut(.end(nil)), promise: nil)
        unflushed = true
    }

    /// The `Date` header's value (RFC 9110 §6.6.1), made at most once a second.
    private func currentDate() -> String {
        let now = time(nil)
        if now != date.second { date = (now, HTTPValidators.httpDate(secondsSince1970: now)) }
        return date.text
    }
}
