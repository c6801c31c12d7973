import OfflineAgent
import NIOCore
import NIOHTTP1

/// Lets only a mirror's WebSocket upgrade (`MirrorWebSocketUpgrade.origin(of:)`) reach
/// NIO's upgrade handler: from any other first request it removes `Upgrade`, so the
/// request goes on as plain HTTP and gets the answer it gets without one (the plain
/// host's route, 403 for an unknown `.localhost` name). NIO's handler loses a request
/// whose upgrade it declines, so every upgrade that reaches it is either relayed or
/// answered with a `502` by `LocalServerChannel`. A mirror's upgrade that is not a valid
/// WebSocket handshake (RFC 6455 §4.2.1: one `Sec-WebSocket-Key` of 16 bytes in base64,
/// `Sec-WebSocket-Version: 13`) gets a `400` from the filter and the connection closes.
///
/// Only the connection's first request can upgrade: the filter steps out after it.
final class MirrorUpgradeFilter: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let upgrades: MirrorWebSocketUpgrade

    init(upgrades: MirrorWebSocketUpgrade) {
        self.upgrades = upgrades
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
        // A mirror reaches its origin: only for a peer on this machine (`--allow-remote`).
        guard upgrades.origin(of: head) != nil, LocalHost.isLoopback(peer: context.channel.remoteAddress) else {
            head.headers.remove(name: "Upgrade")
            context.fireChannelRead(wrapInboundOut(.head(head)))
            return
        }
        guard Self.isValidHandshake(head.headers) else {
            let body = ByteBuffer(string: "bad request: not a valid WebSocket upgrade (one Sec-WebSocket-Key, Sec-WebSocket-Version: 13)\n")
            let answer = HTTPResponseHead(version: .http1_1, status: .badRequest, headers: [
                "Content-Type": "text/plain; charset=utf-8", "Content-Length": String(body.readableBytes),
                "Cache-Control": "no-store", "Connection": "close",
            ])
            context.write(wrapOutboundOut(.head(answer)), promise: nil)
            context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil)
            context.writeAndFlush(wrapOutboundOut(.end(nil))).assumeIsolated().whenComplete { _ in context.close(promise: nil) }
            return
        }
        context.fireChannelRead(data)
    }

    /// The key and version RFC 6455 requires of the client's handshake.
    static func isValidHandshake(_ headers: HTTPHeaders) -> Bool {
        let keys = headers["Sec-WebSocket-Key"], versions = headers["Sec-WebSocket-Version"]
        guard keys.count == 1, versions.count == 1, versions[0].trimmingWhitespace() == "13" else { return false }
        let key = keys[0].trimmingWhitespace()
        // 16 bytes in base64: 22 characters and `==`.
        return key.utf8.count == 24 && key.hasSuffix("==")
    }
}
