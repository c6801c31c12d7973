import Hummingbird
import NIOCore
import NIOHTTP1
import NIOHTTPTypesHTTP1
import OfflineAgent

/// Lets only a request `LocalRouter` routes to a mirror's WebSocket reach NIO's upgrade
/// handler: the router decides a connection's first request that asks for an upgrade,
/// as it decides every request. A valid WebSocket handshake on a mirror host
/// (`LocalRoute.webSocket` without a refusal) goes on to the upgrade
/// (`MirrorWebSocketUpgrade` opens the origin's); an invalid one gets its refusal here
/// (`400`) and the connection closes; from any other request the filter removes `Upgrade`,
/// so it goes on as plain HTTP and gets the answer it gets without one (its route does not
/// depend on the upgrade). NIO's handler loses a request whose upgrade it declines, so
/// every upgrade that reaches it is either relayed or answered with a `502` by
/// `LocalServerChannel`.
///
/// Only the connection's first request can upgrade: the filter steps out after it.
final class MirrorUpgradeFilter: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart

    private let router: LocalRouter
    private let metrics: LocalServerMetrics
    /// Told the origin whose WebSocket the upgrade that goes on asks for.
    private let onWebSocket: (MirrorOrigin) -> Void

    init(router: LocalRouter, metrics: LocalServerMetrics, onWebSocket: @escaping (MirrorOrigin) -> Void) {
        self.router = router
        self.metrics = metrics
        self.onWebSocket = onWebSocket
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .head(var head) = unwrapInboundIn(data) else {
            context.fireChannelRead(data)
            return
        }
        // Steps out once the head has passed (a context fires nothing after its removal).
        defer { context.pipeline.syncOperations.removeHandler(context: context, promise: nil) }
        guard head.headers.contains(name: "Upgrade") else {
            context.fireChannelRead(data)
            return
        }
        // The head as the responder would get it (Hummingbird's own conversion); one that
        // does not convert is no upgrade, and the responder's codec refuses it.
        let route = (try? HTTPRequest(head, secure: false, splitCookie: false)).map { request in
            router.route(Request(head: request, body: RequestBody(buffer: ByteBuffer())),
                         peerIsLoopback: LocalHost.isLoopback(peer: context.channel.remoteAddress))
        }
        switch route {
        case .webSocket(let origin, nil):
            onWebSocket(origin)
            context.fireChannelRead(data)
        case .webSocket(_, let refusal?):
            refusal.count(in: metrics)
            LocalErrorAnswer(refusal).writeThenClose(on: context)
        default:
            head.headers.remove(name: "Upgrade")
            context.fireChannelRead(wrapInboundOut(.head(head)))
        }
    }
}
