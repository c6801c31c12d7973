import NIOCore
import OfflineAgent

/// Closes a connection of `offline-agent serve` that holds a slot without using it:
/// the first handler of each connection's pipeline, it sees raw bytes both ways.
///
/// - header timeout: from the connection's start, or from the first byte of a request
///   after the previous one, the request head (up to its empty line) must arrive within
///   `headerTimeout` (a half-sent or trickled head never completes);
/// - idle timeout: once the server has written, the connection is closed when nothing
///   is read or written for `idleTimeout` (an idle keep-alive connection, or a response
///   the client stopped reading, whose writes then stall).
///
/// - body timeout: while a request's body is read (from its head's empty line until the
///   HTTP layer says the request ended, `requestRead()`), the connection is closed when
///   nothing is read for `idleTimeout`: a body may take as long as it needs while bytes
///   keep coming (a large upload to a slow origin), never stall for good.
///
/// Between a request's end and the server's first write no timer runs: a slow answer
/// is the server's doing, not the client's. Only the end of a head is looked for (an
/// empty line); bytes after a request's end count as a new head.
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
    /// True from a head's first byte until its empty line. A new connection starts
    /// here, so one that sends nothing gets the header timeout.
    private var readingHead = true
    /// The head being read has a byte other than CR and LF.
    private var headHasBytes = false
    /// Inside a head: the current line has no byte yet but CRs.
    private var atLineStart = false
    /// A head is complete and the server has not written since.
    private var awaitingResponse = false
    /// A head is complete and its request has not ended: what is read is its body.
    private var readingBody = false
    private var headStarted: NIODeadline
    private var lastActivity: NIODeadline
    private var timer: Scheduled<Void>?
    /// This handler's context while it is in the pipeline (for `requestRead()`).
    private var context: ChannelHandlerContext?
    private var timerDeadline: NIODeadline?

    init(headerTimeout: TimeAmount, idleTimeout: TimeAmount, metrics: LocalServerMetrics) {
        self.headerTimeout = headerTimeout
        self.idleTimeout = idleTimeout
        self.metrics = metrics
        let now = NIODeadline.now()
        headStarted = now
        lastActivity = now
    }

    /// Whether a request was read whose answer has not begun (`LocalRequestFraming`): a
    /// request pipelined behind another one waits for the server, not for the client.
    var answerOwed: () -> Bool = { false }

    /// The next deadline and what it enforces; nil while the server owes an answer.
    private var deadline: (at: NIODeadline, kind: LocalConnectionTimeout)? {
        if readingHead { return (headStarted + headerTimeout, .header) }
        if readingBody { return (lastActivity + idleTimeout, .idle) }
        if awaitingResponse || answerOwed() { return nil }
        return (lastActivity + idleTimeout, .idle)
    }

    func channelActive(context: ChannelHandlerContext) {
        arm(context)
        context.fireChannelActive()
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        if context.channel.isActive { arm(context) }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        cancel()
    }

    func channelInactive(context: ChannelHandlerContext) {
        cancel()
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let now = NIODeadline.now()
        lastActivity = now
        let wasReading = readingHead
        scan(unwrapInboundIn(data), now: now)
        if readingHead != wasReading || readingHead || readingBody { arm(context) }
        context.fireChannelRead(data)
    }

    /// The HTTP layer read the current request to its end: no body is read any more, and
    /// the next bytes begin a head.
    func requestRead() {
        guard readingBody else { return }
        readingBody = false
        if let context { arm(context) }
    }

    /// Follows head boundaries through `bytes`: an empty line (`\r\n` or `\n`) ends a
    /// head; CR and LF before a head's first byte are ignored, as HTTP/1.1 parsers do.
    private func scan(_ bytes: ByteBuffer, now: NIODeadline) {
        bytes.withUnsafeReadableBytes { raw in
            for byte in raw {
                // A body's bytes are not a head; the HTTP layer says where the body ends.
                if readingBody { return }
                if !readingHead || !headHasBytes {
                    if byte == 13 || byte == 10 { continue }
                    if !readingHead {
                        readingHead = true
                        headStarted = now
                    }
                    headHasBytes = true
                    atLineStart = false
                } else if byte == 10 {
                    if atLineStart {
                        readingHead = false
                        headHasBytes = false
                        awaitingResponse = true
                        readingBody = true
                    } else {
                        atLineStart = true
                    }
                } else if byte != 13 {
                    atLineStart = false
                }
            }
        }
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        lastActivity = .now()
        awaitingResponse = false
        // A timer that found the server owing an answer is gone; this write may be its end.
        arm(context)
        context.write(data, promise: promise)
    }

    /// Makes sure a timer fires no later than the current deadline.
    private func arm(_ context: ChannelHandlerContext) {
        guard let at = deadline?.at else { return }
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
        guard let (at, kind) = deadline else { return }
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
