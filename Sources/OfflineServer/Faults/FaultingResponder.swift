import Hummingbird
import OfflineAgent

/// The reference server's responder with `--fault`s injected: before the head
/// (`latency`, `status`) and into the body the real responder produced (`truncate`,
/// `reset-after`, `corrupt`, `stall`). Without faults it only forwards.
struct FaultingResponder: HTTPResponder {
    typealias Context = FaultRequestContext

    let base: ReferenceServerResponder
    let injector: FaultInjector
    static let retryAfterField = HTTPFields.Element.Name("Retry-After")!

    func respond(to request: Request, context: Context) async throws -> Response {
        let inner = BasicRequestContext(source: .init(channel: context.channel, logger: context.logger))
        guard !injector.isEmpty, request.uri.path != "/metrics" else {
            return try await base.respond(to: request, context: inner)
        }
        let scope = ServerFaultScope.of(path: request.uri.path)
        for kind in injector.claim(scope: scope, body: false, bodyLength: nil) {
            switch kind {
            case .latency(let duration):
                try await Task.sleep(for: duration)
            case .status(let code, let retryAfter):
                var response = ReferenceServerResponder.text(.init(code: code), "fault injected: status \(code)\n")
                if let retryAfter { response.headers[Self.retryAfterField] = String(retryAfter) }
                if request.method == .head { response.body = ResponseBody() }
                base.logger.info("\(request.method) \(request.uri) \(code) fault")
                return base.counted(response, for: request)
            default:
                break
            }
        }
        var response = try await base.respond(to: request, context: inner)
        // Only a body under way can break: not a HEAD, a 304 or an error page.
        guard request.method == .get, response.status == .ok || response.status == .partialContent,
              let length = response.body.contentLength, length > 0 else { return response }
        let kinds = injector.claim(scope: scope, body: true, bodyLength: length)
        guard !kinds.isEmpty else { return response }
        let plan = FaultBodyPlan(kinds, length: length), channel = context.channel, body = response.body
        response.body = ResponseBody(contentLength: length) { writer in
            try await body.write(FaultBodyWriter(base: writer, plan: plan, channel: channel))
        }
        return response
    }
}
