import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOWebSocket
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A WebSocket origin on 127.0.0.1:0 for the mirror tests (raw NIOWebSocket, nothing of
/// `serve`): it echoes every text, binary and continuation frame as it came (opcode,
/// FIN, payload), answers pings, answers a close with the same code and reason, and on
/// the text `close-me:<code>:<reason>` closes with that code and reason itself. It
/// chooses `chat.v2` when offered; `/refuse…` is refused with a 403, and a plain HTTP request
/// gets a 403 (`/slow…` a 200 after 1 s). It logs each
/// handshake's target and headers and each close it received.
final class WebSocketEchoOrigin: Sendable {
    let port: Int
    private let channel: any Channel
    private let log: Log

    /// Log lines: `handshake <target>`, `header <name>: <value>`, `close <code> <reason>`.
    var entries: [String] { log.entries }

    /// The headers of the last handshake, names lowercased.
    func handshakeHeader(_ name: String) -> [String] {
        let lines = entries
        let start = lines.lastIndex { $0.hasPrefix("handshake ") } ?? lines.endIndex
        let prefix = "header \(name.lowercased()): "
        return lines[start...].filter { $0.hasPrefix(prefix) }.map { String($0.dropFirst(prefix.count)) }
    }

    private init(port: Int, channel: any Channel, log: Log) {
        self.port = port
        self.channel = channel
        self.log = log
    }

    static func start() async throws -> WebSocketEchoOrigin {
        let log = Log()
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                log.accepted(channel)
                return channel.eventLoop.makeCompletedFuture {
                    let upgrader = NIOWebSocketServerUpgrader(
                        maxFrameSize: 1 << 24, automaticErrorHandling: true,
                        shouldUpgrade: { channel, head in
                            log.append("handshake \(head.uri)")
                            for (name, value) in head.headers { log.append("header \(name.lowercased()): \(value)") }
                            guard !head.uri.hasPrefix("/refuse") else { return channel.eventLoop.makeSucceededFuture(nil) }
                            var headers = HTTPHeaders()
                            let offered = head.headers["Sec-WebSocket-Protocol"].flatMap { $0.split(separator: ",") }
                                .map { $0.trimmingCharacters(in: .whitespaces) }
                            if offered.contains("chat.v2") { headers.add(name: "Sec-WebSocket-Protocol", value: "chat.v2") }
                            return channel.eventLoop.makeSucceededFuture(headers)
                        },
                        upgradePipelineHandler: { channel, _ in
                            channel.eventLoop.makeCompletedFuture {
                                channel.pipeline.syncOperations.removeHandler(name: "refuse", promise: nil)
                                try channel.pipeline.syncOperations.addHandler(EchoHandler(log: log))
                            }
                        })
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(
                        withServerUpgrade: (upgraders: [upgrader], completionHandler: { _ in }))
                    try channel.pipeline.syncOperations.addHandler(RefuseHandler(), name: "refuse")
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        return WebSocketEchoOrigin(port: channel.localAddress?.port ?? 0, channel: channel, log: log)
    }

    /// Stops listening.
    func stop() async {
        try? await channel.close()
    }

    /// Drops every connection without a close frame.
    func closeConnections() async {
        for child in log.children { try? await child.close() }
    }

    /// What the handlers saw, in order.
    final class Log: Sendable {
        private let lines = Mutex<[String]>([])
        private let channels = Mutex<[any Channel]>([])
        func append(_ line: String) { lines.withLock { $0.append(line) } }
        var entries: [String] { lines.withLock { $0 } }
        func accepted(_ channel: any Channel) { channels.withLock { $0.append(channel) } }
        var children: [any Channel] { channels.withLock { $0 } }
    }

    /// Answers any request that was not upgraded with a 403, but `/slow…` with a 200
    /// after 1 s (a pending request that holds a headless browser's virtual time).
    private final class RefuseHandler: ChannelInboundHandler, RemovableChannelHandler {
        typealias InboundIn = HTTPServerRequestPart
        typealias OutboundOut = HTTPServerResponsePart
        private var slow = false

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch unwrapInboundIn(data) {
            case .head(let head):
                slow = head.uri.hasPrefix("/slow")
            case .body:
                break
            case .end:
                if slow {
                    context.eventLoop.assumeIsolated().scheduleTask(in: .seconds(1)) { self.answer(context, .ok, "slow\n") }
                } else {
                    answer(context, .forbidden, "forbidden\n")
                }
            }
        }

        private func answer(_ context: ChannelHandlerContext, _ status: HTTPResponseStatus, _ text: String) {
            let head = HTTPResponseHead(version: .http1_1, status: status, headers: [
                "Content-Length": String(text.utf8.count), "Content-Type": "text/plain", "Connection": "close",
            ])
            context.write(wrapOutboundOut(.head(head)), promise: nil)
            context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(string: text)))), promise: nil)
            context.writeAndFlush(wrapOutboundOut(.end(nil))).assumeIsolated().whenComplete { _ in context.close(promise: nil) }
        }
    }

    private final class EchoHandler: ChannelInboundHandler {
        typealias InboundIn = WebSocketFrame
        typealias OutboundOut = WebSocketFrame
        let log: Log
        var sentClose = false

        init(log: Log) { self.log = log }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let frame = unwrapInboundIn(data)
            var payload = frame.unmaskedData
            switch frame.opcode {
            case .connectionClose:
                let code = payload.readInteger(as: UInt16.self).map(String.init) ?? "none"
                let reason = payload.readString(length: payload.readableBytes) ?? ""
                log.append("close \(code) \(reason)")
                if sentClose {
                    context.close(promise: nil)
                } else {
                    sentClose = true
                    let reply = WebSocketFrame(fin: true, opcode: .connectionClose, data: frame.unmaskedData)
                    context.writeAndFlush(wrapOutboundOut(reply)).assumeIsolated().whenComplete { _ in context.close(promise: nil) }
                }
            case .ping:
                context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .pong, data: payload)), promise: nil)
            case .text where String(buffer: payload).hasPrefix("close-me:"):
                let parts = String(buffer: payload).split(separator: ":", maxSplits: 2)
                var data = ByteBuffer()
                data.writeInteger(UInt16(parts[1]) ?? 1000)
                data.writeString(parts.count > 2 ? String(parts[2]) : "")
                sentClose = true
                context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, data: data)), promise: nil)
            case .text, .binary, .continuation:
                context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: frame.fin, opcode: frame.opcode, data: payload)), promise: nil)
            default:
                break
            }
        }
    }
}
