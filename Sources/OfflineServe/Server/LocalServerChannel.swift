import HTTPTypes
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1
import NIOWebSocket
import OfflineAgent
import ServiceLifecycle
import Synchronization

/// The connections of `offline-agent serve`: Hummingbird's HTTP/1.1 channel behind a
/// connection cap (`LocalConnectionLimiter`), `LocalConnectionGuard`'s timeouts and
/// `LocalRequestFraming`, so hostile or stuck clients cannot take every descriptor or
/// every slot for good, and every request NIO's decoder refuses is answered.
///
/// At the cap, a new connection takes the place of the one idle longest (closed at once);
/// when none is idle it is answered `503` with `Connection: close` and closed at once: it
/// never gets a pipeline or a slot.
///
/// A WebSocket upgrade on a mirror host (`MirrorWebSocketUpgrade`) becomes a relay to the
/// origin's WebSocket (`WebSocketRelay`); one the origin gives no WebSocket for gets a
/// `502`, an invalid one (no key, a version other than 13) a `400` (`MirrorUpgradeFilter`). Every other request,
/// an upgrade anywhere else included (`MirrorUpgradeFilter`), goes to the responder.
struct LocalServerChannel: ServerChildChannel {
    struct Value: ServerChildChannelValue {
        let channel: any Channel
        /// What the connection became; nil for a connection refused by the cap.
        let connection: EventLoopFuture<Connection>?
    }

    /// What a connection became once its first request head was read.
    enum Connection: Sendable {
        /// HTTP, for the responder.
        case http(HTTP1Channel.Value)
        /// A mirror's WebSocket upgrade the origin gave no WebSocket for: a 502 with this body.
        case failedUpgrade(HTTP1Channel.Value, String)
        /// A mirror's WebSocket, relayed to the origin's.
        case webSocket(page: NIOAsyncChannel<WebSocketFrame, WebSocketFrame>, origin: OriginWebSocket)
    }

    let http1: HTTP1Channel
    let limiter: LocalConnectionLimiter
    let headerTimeout: TimeAmount
    let idleTimeout: TimeAmount
    let metrics: LocalServerMetrics
    let webSockets: MirrorWebSocketUpgrade

    static let refusal = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 26\r\n"
        + "Retry-After: 1\r\nCache-Control: no-store\r\nConnection: close\r\n\r\ntoo many open connections\n"

    /// The upgrade's decision, from `shouldUpgrade` to the pipeline it leads to.
    private final class Pending: Sendable {
        let decision = Mutex<MirrorWebSocketUpgrade.Decision?>(nil)
    }

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        switch limiter.acquire(channel) {
        case .refused:
            metrics.recordRefusedConnection()
            return channel.eventLoop.makeSucceededFuture(Value(channel: channel, connection: nil))
        case .admittedClosing(let evicted):
            metrics.recordEvictedConnection()
            evicted.close(promise: nil)
        case .admitted:
            break
        }
        let limiter = self.limiter, metrics = self.metrics
        metrics.recordConnection(opened: true)
        channel.closeFuture.whenComplete { _ in
            limiter.release(channel)
            metrics.recordConnection(opened: false)
        }
        return channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.addHandler(
                LocalConnectionGuard(headerTimeout: headerTimeout, idleTimeout: idleTimeout, metrics: metrics))
            let decoder = http1.configuration.httpDecoder
            let pending = Pending()
            let webSockets = self.webSockets
            let upgrader = NIOTypedWebSocketServerUpgrader<Connection>(
                maxFrameSize: webSockets.limits.maxFrameSize,
                shouldUpgrade: { channel, head in
                    let promise = channel.eventLoop.makePromise(of: HTTPHeaders?.self)
                    promise.completeWithTask {
                        let decision = await webSockets.decide(head, eventLoop: channel.eventLoop)
                        pending.decision.withLock { $0 = decision }
                        guard case .relay(_, let headers) = decision else {
                            // Declined: the channel answers 502 (see `Connection.failedUpgrade`).
                            return nil
                        }
                        return headers
                    }
                    return promise.futureResult
                },
                upgradePipelineHandler: { channel, _ in
                    channel.eventLoop.makeCompletedFuture {
                        guard case .relay(let origin, _) = pending.decision.withLock({ $0 }) else {
                            throw ChannelError.inappropriateOperationForState
                        }
                        // Frames, not heads, from now on: the relay keeps its own timeouts.
                        for handler in [LocalConnectionGuard.self, LocalRequestFraming.self] as [any RemovableChannelHandler.Type] {
                            let context = try channel.pipeline.syncOperations.context(handlerType: handler)
                            channel.pipeline.syncOperations.removeHandler(context: context, promise: nil)
                        }
                        let page = try NIOAsyncChannel<WebSocketFrame, WebSocketFrame>(
                            wrappingChannelSynchronously: channel, configuration: WebSocketRelay.channelConfiguration)
                        return .webSocket(page: page, origin: origin)
                    }
                })
            var configuration = NIOUpgradableHTTPServerPipelineConfiguration<Connection>(
                upgradeConfiguration: .init(upgraders: [upgrader], notUpgradingCompletionHandler: { channel in
                    channel.eventLoop.makeCompletedFuture {
                        // As `HTTP1Channel.setup` builds it, after the HTTP/1 codec.
                        try channel.pipeline.syncOperations.addHandler(HTTP1ToHTTPServerCodec(secure: false))
                        try channel.pipeline.syncOperations.addHandler(HTTPConnectionStateHandler(idleTimeout: nil, logger: logger))
                        let http = try HTTP1Channel.Value(
                            wrappingChannelSynchronously: channel, configuration: .init(isOutboundHalfClosureEnabled: true))
                        if case .failed(let body) = pending.decision.withLock({ $0 }) { return .failedUpgrade(http, body) }
                        return .http(http)
                    }
                }))
            configuration.enablePipelining = false  // NIOAsyncChannel pipelines HTTP, as in `HTTP1Channel`
            configuration.enableErrorHandling = false
            configuration.enableResponseHeaderValidation = false
            configuration.decoderConfiguration.maxHeaderFieldSize = decoder.maxHeaderFieldSize
            configuration.decoderConfiguration.maxHeaderListSize = decoder.maxHeaderListSize
            configuration.decoderConfiguration.maxHeaderFieldCount = decoder.maxHeaderFieldCount
            let connection = try channel.pipeline.syncOperations.configureUpgradableHTTPServerPipeline(configuration: configuration)
            let upgradeHandler = try channel.pipeline.syncOperations.handler(type: NIOTypedHTTPServerUpgradeHandler<Connection>.self)
            try channel.pipeline.syncOperations.addHandler(LocalRequestFraming(limiter: limiter), position: .before(upgradeHandler))
            try channel.pipeline.syncOperations.addHandler(MirrorUpgradeFilter(upgrades: webSockets), position: .before(upgradeHandler))
            return Value(channel: channel, connection: connection)
        }
    }

    func handle(value: Value, logger: Logger) async {
        guard let connection = value.connection else {
            let channel = value.channel
            try? await channel.writeAndFlush(channel.allocator.buffer(string: Self.refusal))
            try? await channel.close()
            return
        }
        do {
            switch try await connection.get() {
            case .http(let http):
                await http1.handle(value: http, logger: logger)
            case .failedUpgrade(let http, let body):
                await Self.badGateway(http, body: body)
            case .webSocket(let page, let origin):
                let limits = webSockets.limits
                // A graceful shutdown ends the relay (both sides get a close) instead of waiting for it.
                await withGracefulShutdownHandler {
                    await WebSocketRelay.run(page: page, origin: origin.channel, limits: limits)
                } onGracefulShutdown: {
                    page.channel.close(promise: nil)
                    origin.channel.channel.close(promise: nil)
                }
            }
        } catch {
            try? await value.channel.close()
        }
    }

    /// The 502 of a mirror's upgrade the origin gave no WebSocket for, as `OriginProxy` answers.
    private static func badGateway(_ http: HTTP1Channel.Value, body: String) async {
        try? await http.executeThenClose { _, outbound in
            let bytes = ByteBuffer(string: body)
            let head = HTTPResponse(status: .badGateway, headerFields: [
                .contentType: "text/plain; charset=utf-8", .contentLength: String(bytes.readableBytes),
                .cacheControl: "no-store", .connection: "close", LocalServerResponder.sourceHeader: "origin",
            ])
            try await outbound.write(contentsOf: [.head(head), .body(bytes), .end(nil)])
        }
    }
}
