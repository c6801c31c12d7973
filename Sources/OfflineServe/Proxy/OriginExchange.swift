import HTTPTypes
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOPosix
import OfflineAgent

/// One request on a mirror host forwarded to its origin (`docs/PROTOCOL.md`,
/// "Forwarding"): the head (`ForwardedHeaders.requestHead`, the page's target byte for
/// byte) and body go to the origin as the page sends them, the answer comes back to the
/// page (`OriginCall`, for `OriginProxy`), with backpressure both
/// ways; a 502 with a one-line reason when the origin cannot be reached, and an answer cut
/// off after it began is cut off for the page too. Runs on one event loop, its origin
/// connection's.
///
/// The origin connection comes from the loop's `OriginConnectionPool` and goes back to it
/// once both messages ended on a connection the origin keeps alive. A request without a
/// body and with an idempotent method that meets a pooled connection the origin had
/// closed is sent once more, on a new connection (sending it twice is harmless). An
/// origin that answers `101 Switching Protocols` to a request that asked for no upgrade
/// (no upgrade is ever forwarded here: `MirrorWebSocketUpgrade` relays WebSockets) gets a
/// `502`, and its connection is closed, never reused.
final class OriginExchange {
    /// How the page connection goes on once the exchange is over.
    enum Ending {
        /// Both messages complete: the next request may follow.
        case complete
        /// The answer is complete but the page's request was not read to its end (the
        /// origin answered first): end the page connection once the answer is written.
        case unreadBody
        /// The answer was cut off after it began: close the page connection at once, so
        /// the page sees a broken response, never a short one.
        case broken
    }

    /// What a page whose answer was cut off after it began is told (`Ending.broken`).
    struct Broken: Error {}

    let origin: MirrorOrigin
    private let page: OriginCall
    private let pool: OriginConnectionPool
    private let configuration: OriginProxy.Configuration
    private let metrics: LocalServerMetrics?
    /// The head sent to the origin (`ForwardedHeaders.requestHead`).
    private let head: HTTPRequestHead
    private let servePort: Int
    private let isMirrored: (MirrorOrigin) -> Bool
    private let fallback: FallbackReason?
    /// The request may be sent again on a new connection when a kept one turns out
    /// closed: no body, and an idempotent method (RFC 9110 §9.2.2).
    private let retriable: Bool
    private let onEnd: (Ending) -> Void
    /// Told when the page may be read again (the origin connection took what was sent).
    private let onOriginWritable: () -> Void

    private var connection: OriginConnection?
    private var reused = false
    private var retried = false
    /// The page's parts read before a connection was there.
    private var early: [HTTPClientRequestPart] = []
    /// The page's request was read to its end.
    private(set) var requestRead = false
    /// Skipping an informational (1xx) answer up to its end.
    private var informational = false
    private var responseStarted = false
    /// The origin's answer leaves its connection open for another request.
    private var originKeepsAlive = false
    private var ended = false
    /// The read timeout runs (from the request's end), on the connection's timer.
    private var timing = false
    private var timerStarted = false
    private var lastOriginByte = NIODeadline.now()

    /// An exchange sending `head` (`ForwardedHeaders.requestHead`) to `origin` for a request
    /// the page sent on the server's port `servePort`, answering on `page`.
    init(
        _ head: (head: HTTPRequestHead, retriable: Bool), to origin: MirrorOrigin, servePort: Int, fallback: FallbackReason?,
        isMirrored: @escaping (MirrorOrigin) -> Bool, page: OriginCall, pool: OriginConnectionPool,
        configuration: OriginProxy.Configuration, metrics: LocalServerMetrics?,
        onEnd: @escaping (Ending) -> Void, onOriginWritable: @escaping () -> Void
    ) {
        self.head = head.head
        self.retriable = head.retriable
        self.origin = origin
        self.servePort = servePort
        self.fallback = fallback
        self.isMirrored = isMirrored
        self.page = page
        self.pool = pool
        self.configuration = configuration
        self.metrics = metrics
        self.onEnd = onEnd
        self.onOriginWritable = onOriginWritable
    }

    /// Whether the page connection may be read now: the request was read to its end (what
    /// follows is the next request, the responder's to hold), or its body goes on to an
    /// origin connection that takes it.
    var mayReadPage: Bool {
        ended || requestRead || connection?.isWritable == true
    }

    /// Takes a pooled connection or opens one, and sends the request head.
    func start() {
        if let pooled = pool.take(origin) {
            reused = true
            attach(pooled, flush: true)
            return
        }
        reused = false
        OriginConnection.connect(to: origin, on: page.eventLoop, timeout: TimeAmount(configuration.connectTimeout)).assumeIsolated().whenComplete { [self] result in
            switch result {
            case .success(let connection):
                guard !ended else { return connection.close() }
                attach(connection, flush: true)
            case .failure(let error):
                guard !ended else { return }
                fail(OriginProxy.describe(error))
            }
        }
    }

    private func attach(_ connection: OriginConnection, flush: Bool) {
        self.connection = connection
        connection.exchange = self
        connection.write(.head(head))
        for part in early { connection.write(part) }
        early.removeAll()
        if flush { connection.flush() }
        if requestRead { armTimer() }
        if connection.isWritable { onOriginWritable() }
    }

    /// A part of the page's request body, or its end (nil).
    func pageRead(_ bytes: ByteBuffer?) {
        let forwarded: HTTPClientRequestPart = bytes.map { .body(.byteBuffer($0)) } ?? .end(nil)
        if bytes == nil { requestRead = true }
        guard !ended else { return }
        guard let connection else { return early.append(forwarded) }
        connection.write(forwarded)
        if requestRead {
            connection.flush()
            armTimer()
        }
    }

    /// The page's body cannot be read to its end (its framing is invalid, or the page ended
    /// its side before the body's end): the origin connection is aborted without the end of
    /// the request, so the origin never sees it complete (a chunked body never gets its last
    /// chunk). Before any answer the page gets `400` and the close; after one began, a
    /// broken answer.
    func pageBodyBroken() {
        guard !ended, !requestRead else { return }
        early.removeAll()
        connection?.close()
        connection = nil
        guard !responseStarted else { return end(.broken) }
        page.writeAnswer(.brokenBody, head: head.method == .HEAD)
        end(.unreadBody)
    }

    func pageReadComplete() {
        connection?.flush()
    }

    /// The page connection can take writes again: read the origin again.
    func pageWritable() {
        connection?.resume()
    }

    /// The page connection closed: the origin connection goes too (its exchange is unfinished).
    func pageClosed() {
        guard !ended else { return }
        ended = true
        connection?.close()
        connection = nil
    }

    // MARK: The origin's side (`OriginConnection`)

    func originRead(_ part: HTTPClientResponsePart) {
        guard !ended else { return }
        switch part {
        case .head(let answer):
            if answer.status == .switchingProtocols {
                // The connection now speaks something else, or nothing: never read on or reused.
                fail(("unreachable", "the origin switched protocols without an upgrade request"))
                return
            }
            if answer.status.code < 200 {
                informational = true
                return
            }
            informational = false
            responseStarted = true
            originKeepsAlive = answer.isKeepAlive
            metrics?.recordForwarded(origin: origin.origin, status: Int(answer.status.code))
            page.writeAnswerHead(answer.status) { each in
                ForwardedHeaders.forEachResponseField(
                    answer.headers, origin: origin, servePort: servePort, isMirrored: isMirrored, source: true, fallback: fallback?.rawValue, each)
            }
        case .body(let bytes):
            guard !informational else { return }
            page.writeAnswerBody(bytes)
            if !page.isWritable { connection?.pause() }
        case .end:
            if informational {
                informational = false
                return
            }
            page.writeAnswerEnd()
            finish(keepOrigin: requestRead && originKeepsAlive)
        }
    }

    /// The end of a read burst from the origin: what it sent goes to the page, and the
    /// read timeout starts again (taken once per burst, not per part).
    func originReadComplete() {
        guard !ended else { return }
        lastOriginByte = .now()
        page.flushAnswer()
    }

    func originWritable() {
        guard !ended else { return }
        onOriginWritable()
    }

    /// The origin connection closed (`error` nil) or failed.
    func originClosed(_ error: (any Error)?) {
        guard !ended else { return }
        connection = nil
        // The timer went with the connection; a retry's connection gets its own.
        timing = false
        if responseStarted {
            // Cut off after it began: the page sees a broken response, not a short one.
            metrics?.recordOriginFailure(origin: origin.origin, reason: "broken")
            end(.broken)
            return
        }
        if reused, !retried, retriable {
            // A kept connection the origin had closed, most likely before it saw this
            // request; sent again only when doing so twice is harmless.
            retried = true
            start()
            return
        }
        fail(error.map(OriginProxy.describe) ?? ("unreachable", "the origin closed the connection before answering"))
    }

    // MARK: Endings

    /// Answers 502 with `why` when nothing of the answer was sent yet.
    private func fail(_ failure: (reason: String, why: String)) {
        metrics?.recordOriginFailure(origin: origin.origin, reason: failure.reason)
        guard !responseStarted else { return end(.broken) }
        page.writeAnswer(.unreachable(origin, why: failure.why, fallback: fallback?.rawValue), head: head.method == .HEAD)
        connection?.close()
        connection = nil
        end(requestRead ? .complete : .unreadBody)
    }

    /// The answer ended: the origin connection is kept when its request was sent whole
    /// and the origin did not say it closes it.
    private func finish(keepOrigin: Bool) {
        if let connection {
            self.connection = nil
            if keepOrigin { pool.park(connection) } else { connection.close() }
        }
        end(requestRead ? .complete : .unreadBody)
    }

    private func end(_ ending: Ending) {
        guard !ended else { return }
        ended = true
        connection?.close()
        connection = nil
        onEnd(ending)
    }

    /// The read timeout, from the request's end: the origin must send something within
    /// it whenever the page is reading (a page that stops reading holds the origin too).
    private func armTimer() {
        guard !timing, !ended, let connection else { return }
        timing = true
        // From the request's end, once: a retry's connection goes on with the same deadline.
        if !timerStarted {
            timerStarted = true
            lastOriginByte = .now()
        }
        connection.wake(by: lastOriginByte + TimeAmount(configuration.readTimeout))
    }

    /// The connection's timer fired while this exchange used it.
    func timerFired() {
        guard timing, !ended else { return }
        let due = lastOriginByte + TimeAmount(configuration.readTimeout)
        let now = NIODeadline.now()
        if now < due || !page.isWritable {
            connection?.wake(by: max(due, now + .milliseconds(100)))
            return
        }
        fail(("timeout", "no answer within the read timeout"))
    }
}
