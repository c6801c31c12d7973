import NIOCore
import NIOWebSocket
import Synchronization

/// Relays the frames of one mirrored WebSocket between the page and its origin
/// (`docs/PROTOCOL.md`, "Mirrored origins", "WebSockets").
///
/// Frame for frame, both ways: text, binary and continuation frames keep their opcode
/// and FIN bit (a fragmented message stays fragmented, nothing is held whole), pings
/// and pongs pass so each end answers the other's, and a close frame passes with its
/// code and reason. Only the masking is redone: the page's frames are unmasked and
/// masked again with a fresh key for the origin, the origin's go to the page unmasked.
///
/// The relay ends when both sides have sent their close frame (or `closeTimeout` after
/// the first one), when either side's connection drops (the other is then dropped too,
/// so the page sees what it would have seen from the origin), when a message grows past
/// `maxMessageSize` (1009 to both), or after `idleTimeout` without a frame either way
/// (1001 to both). Both connections are closed when it returns.
package enum WebSocketRelay {
    /// The bounds of a mirrored WebSocket.
    package struct Limits: Sendable {
        /// A larger frame from either side ends the WebSocket with 1009 (4 MiB).
        package var maxFrameSize: Int
        /// A larger message (all its fragments) ends the WebSocket with 1009 (16 MiB).
        package var maxMessageSize: Int
        /// The origin's connection, TLS and `101` must all come within this time (10 s).
        package var handshakeTimeout: Duration
        /// With no frame either way for this long, both sides get 1001 (10 minutes).
        package var idleTimeout: Duration
        /// After one side's close frame, the other's must follow within this time (5 s).
        package var closeTimeout: Duration

        package init(
            maxFrameSize: Int = 4 << 20, maxMessageSize: Int = 16 << 20, handshakeTimeout: Duration = .seconds(10),
            idleTimeout: Duration = .seconds(600), closeTimeout: Duration = .seconds(5)
        ) {
            self.maxFrameSize = maxFrameSize
            self.maxMessageSize = maxMessageSize
            self.handshakeTimeout = handshakeTimeout
            self.idleTimeout = idleTimeout
            self.closeTimeout = closeTimeout
        }
    }

    typealias Frames = NIOAsyncChannel<WebSocketFrame, WebSocketFrame>

    /// Few frames read ahead per side: each may be up to `maxFrameSize`.
    static let channelConfiguration = Frames.Configuration(backPressureStrategy: .init(lowWatermark: 1, highWatermark: 2))

    /// How one direction ended.
    private enum End: Sendable {
        case closeRelayed
        case dropped
        case tooLarge
        case idle
        case closeTimeout
    }

    /// When the last frame passed, either way.
    private final class Activity: Sendable {
        private let last = Mutex(ContinuousClock.now)
        func touch() { last.withLock { $0 = .now } }
        var lastFrame: ContinuousClock.Instant { last.withLock { $0 } }
    }

    /// Relays until the WebSocket ends, then closes both connections.
    static func run(page: Frames, origin: Frames, limits: Limits) async {
        let activity = Activity()
        do {
            try await page.executeThenClose { pageInbound, pageOutbound in
                try await origin.executeThenClose { originInbound, originOutbound in
                    await withTaskGroup(of: End.self) { group in
                        group.addTask { await pump(pageInbound, to: originOutbound, mask: true, limits: limits, activity: activity) }
                        group.addTask { await pump(originInbound, to: pageOutbound, mask: false, limits: limits, activity: activity) }
                        group.addTask {
                            // Wakes at the earliest moment the WebSocket could be idle.
                            while !Task.isCancelled {
                                let due = activity.lastFrame + limits.idleTimeout
                                if ContinuousClock.now >= due { return .idle }
                                try? await Task.sleep(until: due)
                            }
                            return .idle
                        }
                        var closes = 0
                        relay: while let end = await group.next() {
                            switch end {
                            case .closeRelayed:
                                closes += 1
                                if closes == 2 { break relay }
                                // One side said goodbye: the other gets `closeTimeout` to answer.
                                group.addTask {
                                    try? await Task.sleep(for: limits.closeTimeout)
                                    return .closeTimeout
                                }
                            case .idle:
                                if closes > 0 { continue relay }
                                try? await pageOutbound.write(closeFrame(.goingAway, mask: false))
                                try? await originOutbound.write(closeFrame(.goingAway, mask: true))
                                break relay
                            case .tooLarge:
                                try? await pageOutbound.write(closeFrame(.messageTooLarge, mask: false))
                                try? await originOutbound.write(closeFrame(.messageTooLarge, mask: true))
                                break relay
                            case .dropped, .closeTimeout:
                                break relay
                            }
                        }
                        group.cancelAll()
                        // A pump may be waiting on a read or a write: closing the connections ends it.
                        page.channel.close(promise: nil)
                        origin.channel.close(promise: nil)
                    }
                }
            }
        } catch {
            page.channel.close(promise: nil)
            origin.channel.close(promise: nil)
        }
    }

    /// Copies frames from one side to the other until a close frame has been copied,
    /// the reading side drops, or a message grows too large.
    private static func pump(
        _ inbound: NIOAsyncChannelInboundStream<WebSocketFrame>, to outbound: NIOAsyncChannelOutboundWriter<WebSocketFrame>,
        mask: Bool, limits: Limits, activity: Activity
    ) async -> End {
        var messageSize = 0
        do {
            for try await frame in inbound {
                activity.touch()
                switch frame.opcode {
                case .text, .binary:
                    messageSize = frame.length
                case .continuation:
                    messageSize += frame.length
                default:
                    break
                }
                if messageSize > limits.maxMessageSize { return .tooLarge }
                let copy = WebSocketFrame(
                    fin: frame.fin, rsv1: frame.rsv1, rsv2: frame.rsv2, rsv3: frame.rsv3, opcode: frame.opcode,
                    maskKey: mask ? .random() : nil, data: frame.unmaskedData)
                try await outbound.write(copy)
                if frame.opcode == .connectionClose { return .closeRelayed }
            }
        } catch {}
        return .dropped
    }

    private static func closeFrame(_ code: WebSocketErrorCode, mask: Bool) -> WebSocketFrame {
        var data = ByteBuffer()
        data.write(webSocketErrorCode: code)
        return WebSocketFrame(fin: true, opcode: .connectionClose, maskKey: mask ? .random() : nil, data: data)
    }
}
