import Crypto
import FoundationEssentials
import Hummingbird
import OfflineAgent

extension LocalServerResponder {
    static let referrerPolicy = HTTPFields.Element.Name("Referrer-Policy")!

    /// `GET|HEAD /session/restore?history=<JSON>`: the restore page, or 400 with the reason.
    /// `launch`: the request may count a launch (`LocalRouter.mayCountLaunch`).
    func restoreSession(_ request: Request, head: Bool, launch: Bool) async -> Response {
        guard let raw = request.uri.queryParameters[values: "history"].last, !raw.isEmpty else {
            return LocalErrorAnswer(
                .badRequest, .text("missing query parameter 'history' (percent-encoded JSON {\"history\": [URL, …], \"currentPage\": 0 or less})")
            ).response(head: head)
        }
        let history: SessionHistory
        do {
            history = try SessionHistory(json: Data(raw.utf8))
        } catch let error as OfflineAgentError {
            return LocalErrorAnswer(.badRequest, .text(error.reason)).response(head: head)
        } catch {
            return LocalErrorAnswer(.badRequest, .text("invalid 'history'")).response(head: head)
        }
        // Restoring a session launches the app of its current entry.
        if launch { _ = await lifecycle.countLaunch(resolver.resolve(history.entries[history.currentIndex]), logger: logger) }
        let buffer = Self.allocator.buffer(string: LocalSessionPage.html(history))
        let headers: HTTPFields = [
            .contentType: "text/html; charset=utf-8",
            .contentLength: String(buffer.readableBytes),
            // The page is one use of one history; a cached copy would replay it.
            .cacheControl: "no-store",
            .contentSecurityPolicy: LocalSessionPage.contentSecurityPolicy,
            // The restored pages must not see this URL (the whole history) as their referrer.
            Self.referrerPolicy: "no-referrer",
        ]
        return Response(status: .ok, headers: headers, body: head ? ResponseBody() : ResponseBody(byteBuffer: buffer))
    }
}
