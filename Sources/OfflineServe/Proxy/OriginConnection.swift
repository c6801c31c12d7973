import NIOCore
import NIOHTTP1
import NIOPosix
import NIOTLS
import OfflineAgent

/// One HTTP/1.1 connection to an origin, used by one `OriginExchange` at a time and kept
/// in its event loop's `OriginConnectionPool` between them.
///
/// The last handler of the connection's pipeline (after TLS for `https` and NIO's HTTP
/// client codec): it hands the origin's response parts to the exchange that owns the
/// connection, and holds the connection's reads while that exchange's page is not
/// reading (backpressure from the page to the origin).
final class OriginConnection: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPClientResponsePart
    typealias OutboundIn = HTTPClientRequestPart
    typealias OutboundOut = HTTPClientRequestPart

    let origin: MirrorOrigin
    /// The exchange using the connection; nil while it waits in the pool.
    var exchange: OriginExchange?
    /// The pool the connection waits in, from when it is first parked (one per event loop,
    /// living as long as the process).
    weak var pool: OriginConnectionPool?
    /// When the connection was parked in `pool`; nil while it is in use.
    var idleSince: NIODeadline?
    /// The connection's one timer, for its exchange's read timeout and the pool's idle
    /// timeout, and the deadline it is scheduled at.
    private var timer: Scheduled<Void>?
    private var timerDeadline = NIODeadline.distantFuture
    private(set) var channel: (any Channel)?
    private var context: ChannelHandlerContext?
    /// Reads are held (the page is not reading); `readHeld` is a read owed once they resume.
    private var paused = false
    private var readHeld = false
    /// The TLS handshake ended; `handshake` is waited on until it has.
    private var handshaken = false
    private var handshake: EventLoopPromise<Void>?

    init(origin: MirrorOrigin) {
        self.origin = origin
    }

    /// No TLS handshake with an `https` origin within the connect timeout.
    struct HandshakeTimeout: Error {}

    /// Opens a connection to `origin` on `eventLoop` and, for `https`, completes the TLS
    /// handshake, both within `timeout`. Nothing is sent before the handshake ends: TLS
    /// would hold what is written meanwhile outside the channel's backpressure.
    static func connect(to origin: MirrorOrigin, on eventLoop: any EventLoop, timeout: TimeAmount) -> EventLoopFuture<OriginConnection> {
        let deadline = NIODeadline.now() + timeout
        // Completed on the channel's own loop, which is `eventLoop`: the connection is not
        // `Sendable`, and never leaves that loop.
        let connected = eventLoop.makePromise(of: OriginConnection.self)
        ClientBootstrap(group: eventLoop)
            .connectTimeout(timeout)
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try OriginTLS.addHandler(for: origin, to: channel)
                    // No header validation of its own: every head sent comes from one the page's
                    // HTTP decoder already checked.
                    try channel.pipeline.syncOperations.addHTTPClientHandlers(leftOverBytesStrategy: .dropBytes, enableOutboundHeaderValidation: false)
                    try channel.pipeline.syncOperations.addHandler(OriginConnection(origin: origin))
                }
            }
            .connect(host: WebAddress.unbracketed(origin.host), port: origin.port)
            .whenComplete { result in
                do {
                    let connection = try result.get().pipeline.syncOperations.handler(type: OriginConnection.self)
                    connection.ready(by: deadline).assumeIsolated().whenComplete { ready in
                        switch ready {
                        case .success: connected.assumeIsolated().succeed(connection)
                        case .failure(let error): connected.fail(error)
                        }
                    }
                } catch {
                    connected.fail(error)
                }
            }
        return connected.futureResult
    }

    /// Succeeds once the connection can take the request: at once for `http`, after the
    /// TLS handshake for `https`; fails (and closes the connection) at `deadline`.
    private func ready(by deadline: NIODeadline) -> EventLoopFuture<Void> {
        guard let context else { return channel!.eventLoop.makeFailedFuture(ChannelError.ioOnClosedChannel) }
        guard origin.scheme == "https", !handshaken else { return context.eventLoop.makeSucceededVoidFuture() }
        let promise = context.eventLoop.makePromise(of: Void.self)
        handshake = promise
        let timer = context.eventLoop.assumeIsolated().scheduleTask(deadline: deadline) { [self] in
            failHandshake(HandshakeTimeout())
            close()
        }
        promise.futureResult.whenComplete { _ in timer.cancel() }
        return promise.futureResult
    }

    private func failHandshake(_ error: any Error) {
        handshake?.fail(error)
        handshake = nil
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? TLSUserEvent, case .handshakeCompleted = event {
            handshaken = true
            handshake?.succeed()
            handshake = nil
        }
        context.fireUserInboundEventTriggered(event)
    }

    var isWritable: Bool { channel?.isWritable ?? false }
    var isActive: Bool { channel?.isActive ?? false }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        channel = context.channel
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if let exchange {
            exchange.originRead(unwrapInboundIn(data))
        } else {
            // An idle connection has nothing to say: whatever it sends, it is not reused.
            context.close(promise: nil)
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        exchange?.originReadComplete()
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { exchange?.originWritable() }
    }

    func channelInactive(context: ChannelHandlerContext) {
        failHandshake(ChannelError.eof)
        cancelTimer()
        if let exchange {
            self.exchange = nil
            exchange.originClosed(nil)
        } else if idleSince != nil {
            pool?.remove(self)
        }
    }

    /// Makes the timer fire by `deadline`. Re-armed lazily: a deadline no earlier than the
    /// one scheduled waits for that one, which then asks again (`timerFired`), so a
    /// connection kept busy schedules about once per timeout, not once per request.
    func wake(by deadline: NIODeadline) {
        guard let context, deadline < timerDeadline else { return }
        timer?.cancel()
        timerDeadline = deadline
        timer = context.eventLoop.assumeIsolated().scheduleTask(deadline: deadline) { [self] in
            timer = nil
            timerDeadline = .distantFuture
            timerFired()
        }
    }

    private func timerFired() {
        if let exchange {
            exchange.timerFired()
        } else if let idleSince {
            let expiry = idleSince + OriginConnectionPool.idleTimeout
            guard NIODeadline.now() >= expiry else { return wake(by: expiry) }
            pool?.remove(self)
            close()
        }
    }

    private func cancelTimer() {
        timer?.cancel()
        timer = nil
        timerDeadline = .distantFuture
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        failHandshake(error)
        if let exchange {
            self.exchange = nil
            exchange.originClosed(error)
        }
        context.close(promise: nil)
    }

    func read(context: ChannelHandlerContext) {
        if paused {
            readHeld = true
        } else {
            context.read()
        }
    }

    /// Stops reading from the origin until `resume()`.
    func pause() {
        paused = true
    }

    /// Reads from the origin again, with the read held while paused.
    func resume() {
        guard paused else { return }
        paused = false
        if readHeld, let context {
            readHeld = false
            context.read()
        }
    }

    func write(_ part: HTTPClientRequestPart) {
        context?.write(wrapOutboundOut(part), promise: nil)
    }

    func flush() {
        context?.flush()
    }

    func close() {
        exchange = nil
        cancelTimer()
        channel?.close(promise: nil)
    }
}
