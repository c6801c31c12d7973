import NIOCore
import NIOHTTP1
import NIOPosix
import NIOWebSocket
import OfflineAgent
import Synchronization

/// A WebSocket connection to an origin, opened for a page's upgrade on the origin's
/// mirror (`docs/PROTOCOL.md`, "Mirrored origins", "WebSockets"): `ws://` for an `http`
/// origin, `wss://` for `https`, on the origin's port, with the handshake headers the
/// page's request carries there (`ForwardedHeaders.webSocketRequest`).
package struct OriginWebSocket: Sendable {
    /// The frames to and from the origin (the client side: what is sent must be masked).
    package let channel: NIOAsyncChannel<WebSocketFrame, WebSocketFrame>
    /// The origin's answer to the upgrade (`Sec-WebSocket-Protocol` among its headers).
    package let response: HTTPResponseHead

    /// Why the origin gave no WebSocket.
    package enum Failure: Error, Sendable {
        /// It answered the upgrade with something other than `101 Switching Protocols`.
        case refused
        /// No `101` within the handshake timeout (connection, TLS and answer together).
        case handshakeTimeout
    }

    private enum Outcome: Sendable {
        case upgraded(NIOAsyncChannel<WebSocketFrame, WebSocketFrame>, HTTPResponseHead)
        case refused
    }

    /// Connects to `origin` and asks for a WebSocket at `target` (path and query) with
    /// `headers` (without `Upgrade`, `Connection`, `Sec-WebSocket-Key` and
    /// `-Version`, which the handshake adds; `Host` is the origin's authority unless
    /// `headers` name one), within `limits.handshakeTimeout`.
    ///
    /// - Throws: `Failure`, or the connection's error (refused, unresolvable, TLS).
    package static func connect(
        to origin: MirrorOrigin, target: String, headers: HTTPHeaders, limits: WebSocketRelay.Limits,
        group: any EventLoopGroup
    ) async throws -> OriginWebSocket {
        let host = WebAddress.unbracketed(origin.host)
        var headers = headers
        if !headers.contains(name: "Host") {
            // `scheme://` off the origin: its host, and its port when not the default.
            headers.add(name: "Host", value: String(origin.authority))
        }
        let head = HTTPRequestHead(version: .http1_1, method: .GET, uri: target, headers: headers)
        let maxFrameSize = limits.maxFrameSize
        let (channel, upgraded) = try await ClientBootstrap(group: group)
            .connectTimeout(.init(limits.handshakeTimeout))
            .connect(host: host, port: origin.port) { channel -> EventLoopFuture<(any Channel, EventLoopFuture<Outcome>)> in
                channel.eventLoop.makeCompletedFuture {
                    try OriginTLS.addHandler(for: origin, to: channel)
                    let upgrader = NIOTypedWebSocketClientUpgrader<Outcome>(
                        maxFrameSize: maxFrameSize,
                        upgradePipelineHandler: { channel, response in
                            channel.eventLoop.makeCompletedFuture {
                                let frames = try NIOAsyncChannel<WebSocketFrame, WebSocketFrame>(
                                    wrappingChannelSynchronously: channel, configuration: WebSocketRelay.channelConfiguration)
                                return .upgraded(frames, response)
                            }
                        })
                    var configuration = NIOUpgradableHTTPClientPipelineConfiguration(
                        upgradeConfiguration: NIOTypedHTTPClientUpgradeConfiguration<Outcome>(
                            upgradeRequestHead: head, upgraders: [upgrader],
                            notUpgradingCompletionHandler: { channel in channel.eventLoop.makeSucceededFuture(.refused) }))
                    // A frame may follow the 101 in the same read: keep it.
                    configuration.leftOverBytesStrategy = .forwardBytes
                    let upgraded = try channel.pipeline.syncOperations.configureUpgradableHTTPClientPipeline(configuration: configuration)
                    return (channel, upgraded)
                }
            }
        // The connect timeout bounded the connection; this bounds TLS and the answer too.
        let timedOut = TimedOut()
        let timeout = channel.eventLoop.scheduleTask(in: .init(limits.handshakeTimeout)) {
            timedOut.flag.store(true, ordering: .relaxed)
            channel.close(promise: nil)
        }
        defer { timeout.cancel() }
        let outcome: Outcome
        do {
            outcome = try await upgraded.get()
        } catch {
            channel.close(promise: nil)
            throw timedOut.flag.load(ordering: .relaxed) ? Failure.handshakeTimeout : error
        }
        switch outcome {
        case .upgraded(let frames, let response):
            return OriginWebSocket(channel: frames, response: response)
        case .refused:
            channel.close(promise: nil)
            throw Failure.refused
        }
    }

    /// Whether the handshake timeout closed the connection.
    private final class TimedOut: Sendable {
        let flag = Atomic(false)
    }
}
