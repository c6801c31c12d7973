import FoundationEssentials
import Hummingbird
import Logging
import OfflineAgent

extension LocalServerResponder {
    /// `POST /.offline-agent/mark-good?app=NAME&version=V` and `/.offline-agent/mark-bad?app=NAME&version=V[&reason=TEXT]`
    /// from a page `LocalRouter.mayControl` allowed to speak for `app`: a JSON answer. Only
    /// the version the page runs (`version`) is confirmed or reported; while another is
    /// active nothing changes and the answer is 409 `version-mismatch`.
    func mark(_ mark: LocalMark, app: String, version: Version, request: Request) async -> Response {
        do {
            if mark == .good {
                let (wasGood, version) = try await lifecycle.run { ($0.status(app).state == .good, try $0.markGood(app, version: version)) }
                // Pages confirm on every load; only the first confirmation is news.
                if !wasGood { logger.notice("\(app): \(version) confirmed good by the page") }
                return Self.json(.ok, ControlAnswer(app: app, version: version.description, state: VersionState.good.rawValue))
            }
            let reason = request.uri.queryParameters[values: "reason"].last.map(String.init) ?? "reported failing by the page"
            let transition = try await lifecycle.run { try $0.markBad(app, version: version, reason: String(reason)) }
            logger.notice("\(app): \(transition.from) marked bad by the page")
            return Self.json(.ok, ControlAnswer(
                app: app, version: transition.from.description, state: VersionState.bad.rawValue,
                active: .some(transition.to?.description), switched: transition.switched))
        } catch let error as OfflineAgentError {
            let status: HTTPResponse.Status = switch error.cause {
            case .busy: .serviceUnavailable
            case .stateInvalid, .versionMismatch: .conflict
            default: .internalServerError
            }
            return LocalErrorAnswer(status, .json(["error": error.reason, "errorCode": error.cause.rawValue])).response()
        } catch {
            return LocalErrorAnswer(.internalServerError, .json(["error": "\(error)"])).response()
        }
    }

    /// The JSON answer of a control route: `{"app","version","state"}`, and for mark-bad
    /// `"active"` (the version now active, null for none) and `"switched"`.
    struct ControlAnswer: Encodable {
        var app: String
        var version: String
        var state: String
        var active: String?? = nil
        var switched: Bool? = nil

        private enum CodingKeys: String, CodingKey { case app, version, state, active, switched }

        func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(app, forKey: .app)
            try c.encode(version, forKey: .version)
            try c.encode(state, forKey: .state)
            if let active { try c.encode(active, forKey: .active) }
            try c.encodeIfPresent(switched, forKey: .switched)
        }
    }

    static func json(_ status: HTTPResponse.Status, _ object: some Encodable) -> Response {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        var buffer = allocator.buffer(capacity: 128)
        buffer.writeBytes((try? encoder.encode(object)) ?? Data("{}".utf8))
        buffer.writeString("\n")
        let headers: HTTPFields = [
            .contentType: "application/json", .contentLength: String(buffer.readableBytes), .cacheControl: "no-store",
        ]
        return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: buffer))
    }
}
