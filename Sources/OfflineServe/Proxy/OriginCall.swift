import HTTPTypes
import Hummingbird
import NIOCore
import NIOHTTP1

/// One forward (`OriginExchange`) driven from the responder's task (`OriginProxy`): the
/// page the exchange answers on is this object, which hands the origin's head to the task
/// and its body as an async sequence, with backpressure both ways.
///
/// Lives on one event loop, the one its origin connection is on; the task talks to it
/// through `OriginCall.Handle`, which hops there.
final class OriginCall {
    typealias Body = NIOThrowingAsyncSequenceProducer<ByteBuffer, any Error, NIOAsyncSequenceProducerBackPressureStrategies.HighLowWatermark, Delegate>

    /// The origin's answer head, as the page gets it.
    struct Head: Sendable {
        var status: HTTPResponse.Status
        var fields: HTTPFields
    }

    /// The exchange ended without an answer head (it never does: a failure is a `502`).
    struct NoAnswer: Error {}

    let eventLoop: any EventLoop
    private var exchange: OriginExchange?
    private let head: EventLoopPromise<Head>
    private var source: Body.Source?
    /// The answer's body is below its high watermark: the origin may be read.
    private(set) var isWritable = true
    /// The task uploading the page's body waits here while the origin is not taking it.
    private var uploadWaiter: EventLoopPromise<Bool>?

    private init(eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
        head = eventLoop.makePromise()
    }

    /// What the task holds: every call hops to the call's loop.
    struct Handle: Sendable {
        let call: NIOLoopBound<OriginCall>
        let head: EventLoopFuture<Head>
        let body: Body

        /// Sends a part of the page's body (`nil`: its end; `end`: this part is the last)
        /// once the origin takes more; false when the exchange is over (nothing more is sent).
        func send(_ bytes: ByteBuffer?, end: Bool = false) async -> Bool {
            let promise = call.eventLoop.makePromise(of: Bool.self)
            call.eventLoop.execute { call.value.send(bytes, end: end, promise: promise) }
            return (try? await promise.futureResult.get()) ?? false
        }

        /// The page's body broke off before its end (`LocalRequestFraming.BrokenBody`): the
        /// origin never gets its end (`OriginExchange.pageBodyBroken`).
        func bodyBroke() {
            call.eventLoop.execute { call.value.exchange?.pageBodyBroken() }
        }
    }

    /// Starts `makeExchange`'s exchange (answering on the new call) on the event loop of
    /// `page`, the page's connection; when it closes, the exchange ends and lets its origin
    /// connection go at once. A request without a body (`hasBody` false) is whole from the
    /// start, so an origin that answers at once finds it complete.
    static func start(
        for page: any Channel, hasBody: Bool,
        _ makeExchange: @escaping @Sendable (_ page: OriginCall, _ onEnd: @escaping (OriginExchange.Ending) -> Void, _ onOriginWritable: @escaping () -> Void)
            -> OriginExchange
    ) async throws -> Handle {
        let eventLoop = page.eventLoop
        // Fails only when the loop is shutting down with the server.
        return try await eventLoop.submit {
            let call = OriginCall(eventLoop: eventLoop)
            let bound = NIOLoopBound(call, eventLoop: eventLoop)
            let delegate = Delegate(call: NIOLoopBound(Weak(call), eventLoop: eventLoop))
            let body = Body.makeSequence(
                backPressureStrategy: .init(lowWatermark: 2, highWatermark: 8), finishOnDeinit: false, delegate: delegate)
            call.source = body.source
            let exchange = makeExchange(call, { [weak call] in call?.ended($0) }, { [weak call] in call?.originWritable() })
            call.exchange = exchange
            if !hasBody { exchange.pageRead(nil) }
            exchange.start()
            let weak = NIOLoopBound(Weak(call), eventLoop: eventLoop)
            page.closeFuture.whenComplete { _ in weak.value.call?.pageClosed() }
            return Handle(call: bound, head: call.head.futureResult, body: body.sequence)
        }.get()
    }

    private func send(_ bytes: ByteBuffer?, end: Bool, promise: EventLoopPromise<Bool>) {
        guard let exchange else { return promise.succeed(false) }
        exchange.pageRead(bytes)
        // The body's last bytes and its end together: an origin that answers as soon as it has
        // them finds the request complete, and its connection is kept.
        if end, bytes != nil { exchange.pageRead(nil) }
        exchange.pageReadComplete()
        if exchange.mayReadPage { return promise.succeed(true) }
        uploadWaiter = promise
    }

    private func originWritable() {
        guard let waiter = uploadWaiter, exchange?.mayReadPage ?? true else { return }
        uploadWaiter = nil
        waiter.succeed(exchange != nil)
    }

    private func ended(_ ending: OriginExchange.Ending) {
        exchange = nil
        uploadWaiter?.succeed(false)
        uploadWaiter = nil
        head.fail(NoAnswer())
        // Cut off after it began: the page must see a broken response, not a short one.
        if ending == .broken { source?.finish(OriginExchange.Broken()) }
        source = nil
    }

    // MARK: The answer, as the exchange writes it

    func writeAnswerHead(_ status: HTTPResponseStatus, fields: ((String, String) -> Void) -> Void) {
        var headers = HTTPFields()
        fields { name, value in
            if let name = HTTPField.Name(name) { headers.append(HTTPField(name: name, value: value)) }
        }
        head.succeed(Head(status: .init(code: Int(status.code), reasonPhrase: status.reasonPhrase), fields: headers))
    }

    /// Gives `answer` (an error of `serve`'s own, whole); `head`: to a `HEAD` request.
    func writeAnswer(_ answer: LocalErrorAnswer, head: Bool) {
        self.head.succeed(Head(status: answer.status, fields: answer.fields))
        if !head { writeAnswerBody(answer.body) }
        writeAnswerEnd()
    }

    func writeAnswerBody(_ bytes: ByteBuffer) {
        if source?.yield(bytes) == .stopProducing { isWritable = false }
    }

    func writeAnswerEnd() {
        source?.finish()
        source = nil
    }

    func flushAnswer() {}

    /// The consumer wants more: read the origin again.
    private func produceMore() {
        isWritable = true
        exchange?.pageWritable()
    }

    /// The page's connection closed: the answer goes nowhere, the origin's connection goes too.
    private func pageClosed() {
        source?.finish(OriginExchange.Broken())
        terminated()
    }

    /// The consumer went away (the page's connection closed): so does the origin's, and a
    /// responder still waiting for the answer's head stops waiting.
    private func terminated() {
        head.fail(NoAnswer())
        source = nil
        exchange?.pageClosed()
        exchange = nil
        uploadWaiter?.succeed(false)
        uploadWaiter = nil
    }

    final class Weak {
        weak var call: OriginCall?
        init(_ call: OriginCall) { self.call = call }
    }

    struct Delegate: NIOAsyncSequenceProducerDelegate {
        let call: NIOLoopBound<Weak>

        func produceMore() {
            call.eventLoop.execute { call.value.call?.produceMore() }
        }

        func didTerminate() {
            call.eventLoop.execute { call.value.call?.terminated() }
        }
    }
}
