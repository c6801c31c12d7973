import HummingbirdCore
import Logging
import NIOCore
import OfflineAgent

/// The connections of `offline-agent serve`: Hummingbird's HTTP/1.1 channel behind a
/// connection cap and `LocalConnectionGuard`'s timeouts, so hostile or stuck clients
/// cannot take every descriptor or every slot for good.
///
/// A connection beyond the cap is answered `503` with `Connection: close` and closed at
/// once: it never gets a pipeline or a slot, and its descriptor is released at once.
struct LocalServerChannel: ServerChildChannel {
    struct Value: ServerChildChannelValue {
        let channel: any Channel
        /// The HTTP channel; nil for a connection refused by the cap.
        let http: HTTP1Channel.Value?
    }

    let http1: HTTP1Channel
    let limiter: LocalConnectionLimiter
    let headerTimeout: TimeAmount
    let idleTimeout: TimeAmount
    let metrics: LocalServerMetrics

    static let refusal = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 26\r\n"
        + "Retry-After: 1\r\nCache-Control: no-store\r\nConnection: close\r\n\r\ntoo many open connections\n"

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        guard limiter.acquire() else {
            metrics.recordRefusedConnection()
            return channel.eventLoop.makeSucceededFuture(Value(channel: channel, http: nil))
        }
        let limiter = self.limiter, metrics = self.metrics
        metrics.recordConnection(opened: true)
        channel.closeFuture.whenComplete { _ in
            limiter.release()
            metrics.recordConnection(opened: false)
        }
        do {
            try channel.pipeline.syncOperations.addHandler(
                LocalConnectionGuard(headerTimeout: headerTimeout, idleTimeout: idleTimeout, metrics: metrics))
        } catch {
            return channel.eventLoop.makeFailedFuture(error)
        }
        return http1.setup(channel: channel, logger: logger).map { Value(channel: channel, http: $0) }
    }

    func handle(value: Value, logger: Logger) async {
        guard let http = value.http else {
            let channel = value.channel
            try? await channel.writeAndFlush(channel.allocator.buffer(string: Self.refusal))
            try? await channel.close()
            return
        }
        await http1.handle(value: http, logger: logger)
    }
}
