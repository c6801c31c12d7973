#if canImport(Glibc)
import Glibc
#endif
import NIOCore
import NIOHTTP1
import OfflineAgent
import OfflineHTTP

/// Opens the origin's WebSocket for a page's upgrade on a mirror host (`docs/PROTOCOL.md`,
/// "Mirrored origins", "WebSockets"), which `LocalRouter` routed there (`LocalRoute.webSocket`,
/// `MirrorUpgradeFilter`): only a valid `GET` handshake on the mirror host of an origin an
/// active whitelist names. The origin's WebSocket is opened before the page gets its
/// `101`, so the origin's subprotocol choice reaches the page and a refusal or an
/// unreachable origin reaches it as a `502`.
struct MirrorWebSocketUpgrade: Sendable {
    let metrics: LocalServerMetrics
    let limits: WebSocketRelay.Limits

    /// What becomes of an upgrade the router sent here.
    enum Decision: Sendable {
        /// The origin's WebSocket is open: the page gets `101` with `headers`.
        case relay(OriginWebSocket, headers: HTTPHeaders)
        /// The origin gave none: the page gets this answer (a `502`).
        case failed(LocalErrorAnswer)
    }

    /// Opens `origin`'s WebSocket for `head` (on the page's event loop).
    func decide(_ head: HTTPRequestHead, to origin: MirrorOrigin, eventLoop: any EventLoop) async -> Decision {
        let servePort = head.headers["Host"].first.flatMap { WebAddress.split(authority: $0)?.port } ?? 80
        do {
            let socket = try await OriginWebSocket.connect(
                to: origin, target: head.uri, headers: ForwardedHeaders.webSocketRequest(head.headers, servePort: servePort),
                limits: limits, group: eventLoop)
            metrics.recordForwarded(origin: origin.origin, status: 101)
            return .relay(socket, headers: ForwardedHeaders.webSocketResponse(socket.response.headers, origin: origin))
        } catch {
            let (reason, why) = Self.describe(error)
            metrics.recordOriginFailure(origin: origin.origin, reason: reason)
            return .failed(.unreachable(origin, why: why, closes: true))
        }
    }

    /// The metrics reason and the one-line explanation of a WebSocket the origin gave none of.
    static func describe(_ error: any Error) -> (reason: String, why: String) {
        switch error {
        case OriginWebSocket.Failure.refused:
            return ("refused", "the origin refused the WebSocket upgrade")
        case OriginWebSocket.Failure.handshakeTimeout, ChannelError.connectTimeout:
            return ("timeout", "no WebSocket within the handshake timeout")
        case ChannelError.ioOnClosedChannel, ChannelError.eof, ChannelError.alreadyClosed:
            return ("unreachable", "the origin closed the connection before answering")
        default:
            if error is NIOHTTPClientUpgradeError {
                return ("refused", "the origin's WebSocket answer is invalid")
            }
            return OriginProxy.describe(error)
        }
    }
}
