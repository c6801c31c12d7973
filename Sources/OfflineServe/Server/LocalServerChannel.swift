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
/// A connection's first request that `LocalRouter` routes to a mirror's WebSocket
/// (`MirrorUpgradeFilter`) becomes a relay to the origin's WebSocket (`WebSocketRelay`,
/// opened by `MirrorWebSocketUpgrade`); one the origin gives no WebSocket for gets a `502`,
/// an invalid one (no key, a version other than 13) a `400`. Every other request, an
/// upgrade anywhere else included, goes to the responder. Every error answer given here
/// is a `LocalErrorAnswer`.
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
        /// A mirror's WebSocket upgrade the origin gave no WebSocket for: this answer (a `502`).
        case failedUpgrade(HTTP1Channel.Value, LocalErrorAnswer)
        /// A mirror's WebSocket, relayed to the origin's.
        case webSocket(page: NIOAsyncChannel<WebSocketFrame, WebSocketFrame>, origin: OriginWebSocket)
    }

    let http1: HTTP1Channel
    let limiter: LocalConnectionLimiter
    let headerTimeout: TimeAmount
    let idleTimeout: TimeAmount
    let metrics: LocalServerMetrics
    /// Routes a connection's first request that asks for an upgrade (`MirrorUpgradeFilter`).
    let router: LocalRouter
    let webSockets: MirrorWebSocketUpgrade

    /// The upgrade of a connection's first request: the origin the router sent it to (from
    /// the filter to `shouldUpgrade`), and the decision (from there to the pipeline it leads to).
    private final class Pending: Sendable {
        let origin = Mutex<MirrorOrigin?>(nil)
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
                    guard let origin = pending.origin.withLock({ $0 }) else {
                        // Only what the router routed to a WebSocket reaches the upgrader
                        // (`MirrorUpgradeFilter`); anything else is declined, and answered.
                        pending.decision.withLock {
                            $0 = .failed(LocalErrorAnswer(.badRequest, .text("bad request: no WebSocket is relayed here"), closes: true))
                        }
                        return channel.eventLoop.makeSucceededFuture(nil)
                    }
                    let promise = channel.eventLoop.makePromise(of: HTTPHeaders?.self)
                    promise.completeWithTask {
                        let decision = await webSockets.decide(head, to: origin, eventLoop: channel.eventLoop)
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
                        if case .failed(let answer) = pending.decision.withLock({ $0 }) { return .failedUpgrade(http, answer) }
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
            let filter = MirrorUpgradeFilter(router: router, metrics: metrics) { origin in pending.origin.withLock { $0 = origin } }
            try channel.pipeline.syncOperations.addHandler(filter, position: .before(upgradeHandler))
            return Value(channel: channel, connection: connection)
        }
    }

    func handle(value: Value, logger: Logger) async {
        guard let connection = value.connection else {
            let channel = value.channel
            try? await channel.writeAndFlush(LocalErrorAnswer.tooManyConnections.wire)
            try? await channel.close()
            return
        }
        do {
            switch try await connection.get() {
            case .http(let http):
                await http1.handle(value: http, logger: logger)
            case .failedUpgrade(let http, let answer):
                await Self.answer(http, answer)
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

    /// Gives `answer` (the `502` of a mirror's upgrade the origin gave no WebSocket for), then closes.
    private static func answer(_ http: HTTP1Channel.Value, _ answer: LocalErrorAnswer) async {
        try? await http.executeThenClose { _, outbound in
            let head = HTTPResponse(status: answer.status, headerFields: answer.fields)
            try await outbound.write(contentsOf: [.head(head), .body(answer.body), .end(nil)])
        }
    }
}
