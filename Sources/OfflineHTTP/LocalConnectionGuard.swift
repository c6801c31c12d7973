import NIOCore

/// Closes a connection of `offline-agent serve` that holds a slot without using it:
/// the first handler of each connection's pipeline, it sees raw bytes both ways.
///
/// - header timeout: from the connection's start, or from the first byte of a request
///   after a response, the server must have started answering within `headerTimeout`
///   (a half-sent or trickled head never completes, so it is never answered);
/// - idle timeout: once the server has written, the connection is closed when nothing
///   is read or written for `idleTimeout` (an idle keep-alive connection, or a response
///   the client stopped reading, whose writes then stall).
///
/// Every request and response only updates a few fields: a timer is rescheduled when
/// the deadline moves earlier than the pending one, or when that one fires early.
final class LocalConnectionGuard: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = IOData
    typealias OutboundOut = IOData

    private let headerTimeout: TimeAmount
    private let idleTimeout: TimeAmount
    private let metrics: LocalServerMetrics
    /// True from a request's first byte until the server writes: its head is being read.
    /// A new connection starts here, so one that sends nothing gets the header timeout.
    private var readingRequest = true
    private var requestStarted: NIODeadline
    private var lastActivity: NIODeadline
    private var timer: Scheduled<Void>?
    private var timerDeadline: NIODeadline?

    init(headerTimeout: TimeAmount, idleTimeout: TimeAmount, metrics: LocalServerMetrics) {
        self.headerTimeout = headerTimeout
        self.idleTimeout = idleTimeout
        self.metrics = metrics
        let now = NIODeadline.now()
        requestStarted = now
        lastActivity = now
    }

    private var deadline: (at: NIODeadline, kind: LocalConnectionTimeout) {
        readingRequest ? (requestStarted + headerTimeout, .header) : (lastActivity + idleTimeout, .idle)
    }

    func channelActive(context: ChannelHandlerContext) {
        arm(context)
        context.fireChannelActive()
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { arm(context) }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        cancel()
    }

    func channelInactive(context: ChannelHandlerContext) {
        cancel()
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let now = NIODeadline.now()
        lastActivity = now
        if !readingRequest {
            readingRequest = true
            requestStarted = now
            arm(context)
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        lastActivity = .now()
        if readingRequest {
            readingRequest = false
            arm(context)
        }
        context.write(data, promise: promise)
    }

    /// Makes sure a timer fires no later than the current deadline.
    private func arm(_ context: ChannelHandlerContext) {
        let at = deadline.at
        if let pending = timerDeadline, pending <= at { return }
        timer?.cancel()
        timerDeadline = at
        timer = context.eventLoop.assumeIsolated().scheduleTask(deadline: at) { [self] in
            fired(context)
        }
    }

    private func fired(_ context: ChannelHandlerContext) {
        timer = nil
        timerDeadline = nil
        let (at, kind) = deadline
        guard NIODeadline.now() >= at else {
            arm(context)
            return
        }
        metrics.recordTimeout(kind)
        context.close(promise: nil)
    }

    private func cancel() {
        timer?.cancel()
        timer = nil
        timerDeadline = .distantPast
    }
}
