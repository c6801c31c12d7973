#if canImport(Glibc)
import Glibc
#endif
import NIOCore
import NIOHTTP1
import OfflineAgent
import OfflineHTTP

/// Which WebSocket upgrades `serve` passes through (`docs/PROTOCOL.md`, "Mirrored
/// origins", "WebSockets"): only a `GET` upgrade on the mirror host of an origin an
/// active whitelist names, never on the plain host or another name (those requests go
/// on as HTTP and get their usual answers). The origin's WebSocket is opened before the
/// page gets its `101`, so the origin's subprotocol choice reaches the page and a
/// refusal or an unreachable origin reaches it as a `502`.
struct MirrorWebSocketUpgrade: Sendable {
    let mirrors: LocalMirrors
    let metrics: LocalServerMetrics
    let limits: WebSocketRelay.Limits

    /// What becomes of an upgrade request that `origin(of:)` let through.
    enum Decision: Sendable {
        /// The origin's WebSocket is open: the page gets `101` with `headers`.
        case relay(OriginWebSocket, headers: HTTPHeaders)
        /// The origin gave none: the page gets `502` with this one-line body.
        case failed(String)
    }

    /// The mirrored origin whose WebSocket `head` asks for: a `GET` upgrade to
    /// `websocket`, one `Host` naming the mirror host of an origin an active whitelist
    /// names, a path other than the page's own `/.offline-agent/` control. Nil for
    /// anything else, which then goes on as HTTP (`MirrorUpgradeFilter`).
    func origin(of head: HTTPRequestHead) -> MirrorOrigin? {
        let hosts = head.headers["Host"]
        guard head.method == .GET, hosts.count == 1, head.uri.hasPrefix("/"), !head.uri.hasPrefix(LocalLifecycle.routePrefix),
              head.headers[canonicalForm: "upgrade"].contains(where: { $0.lowercased() == "websocket" }),
              let authority = WebAddress.split(authority: hosts[0]), let name = LocalRouter.mirrorName(authority.host),
              let origin = mirrors.snapshot().byMirrorHost[name]
        else { return nil }
        return origin
    }

    /// Opens the origin's WebSocket for `head` (on the page's event loop).
    func decide(_ head: HTTPRequestHead, eventLoop: any EventLoop) async -> Decision {
        guard let origin = origin(of: head) else {
            // The whitelist changed since the filter looked.
            return .failed("offline-agent: \(head.headers["Host"].first ?? "") is no longer the mirror of a whitelisted origin\n")
        }
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
            return .failed("offline-agent: cannot reach \(origin.origin): \(why)\n")
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
