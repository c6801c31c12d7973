import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOWebSocket
import Testing
@testable import OfflineAgent
@testable import OfflineServe
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// WebSockets on mirrored origins (`docs/PROTOCOL.md`, "Mirrored origins", "WebSockets"):
/// a page's upgrade on a mirror host is relayed to the origin's WebSocket, frame for
/// frame both ways, through the real `serve` and a real WebSocket origin on loopback.
@Suite("Mirror WebSockets")
struct MirrorWebSocketTests {
    static let page = "<!doctype html><p>ws</p>"

    /// `serve` over an app whitelisting the whole of `origin` (an http origin on loopback).
    static func withServe(origin port: Int, _ body: (RunningLocalServer, String) async throws -> Void) async throws {
        let f = LocalStoreFixture()
        try f.add("ws", version: "1.0.0", fixture: nil, files: ["index.html": Array(page.utf8)], whitelist: ["http://127.0.0.1:\(port)/"])
        try await withLocalServer(f, deviceID: "ws") { server in
            try await body(server, "127.0.0.1.http-\(port).localhost")
        }
    }

    /// Serve and a live echo origin.
    static func withEcho(_ body: (RunningLocalServer, String, WebSocketEchoOrigin) async throws -> Void) async throws {
        let origin = try await WebSocketEchoOrigin.start()
        do {
            try await withServe(origin: origin.port) { server, mirror in try await body(server, mirror, origin) }
        } catch {
            await origin.stop()
            throw error
        }
        await origin.stop()
    }

    /// A page's WebSocket to `host` on the server (the handshake as a browser sends it).
    static func open(
        _ server: RunningLocalServer, host: String, target: String = "/ws", headers extra: [(String, String)] = []
    ) async throws -> OriginWebSocket {
        var headers = HTTPHeaders()
        headers.add(name: "Host", value: "\(host):\(server.port)")
        for (name, value) in extra { headers.add(name: name, value: value) }
        let serve = try #require(MirrorOrigin(scheme: "http", host: "127.0.0.1", port: server.port))
        return try await OriginWebSocket.connect(
            to: serve, target: target, headers: headers, limits: .init(maxFrameSize: 1 << 24, handshakeTimeout: .seconds(60)),
            group: MultiThreadedEventLoopGroup.singleton)
    }

    /// Runs `body` over the socket's frames, at most 5 minutes (then the socket is closed and
    /// reads end): a bound on a hang, not a speed.
    static func session(
        _ socket: OriginWebSocket,
        _ body: (inout NIOAsyncChannelInboundStream<WebSocketFrame>.AsyncIterator, NIOAsyncChannelOutboundWriter<WebSocketFrame>) async throws -> Void
    ) async throws {
        let channel = socket.channel.channel
        let deadline = Task {
            try await Task.sleep(for: .seconds(300))
            channel.close(promise: nil)
        }
        defer { deadline.cancel() }
        try await socket.channel.executeThenClose { inbound, outbound in
            var frames = inbound.makeAsyncIterator()
            try await body(&frames, outbound)
        }
    }

    static func frame(_ opcode: WebSocketOpcode, _ bytes: some Sequence<UInt8>, fin: Bool = true) -> WebSocketFrame {
        WebSocketFrame(fin: fin, opcode: opcode, maskKey: .random(), data: ByteBuffer(bytes: Array(bytes)))
    }

    /// The next frame that is not a pong.
    static func next(_ frames: inout NIOAsyncChannelInboundStream<WebSocketFrame>.AsyncIterator) async throws -> WebSocketFrame {
        while true {
            let frame = try #require(try await frames.next(), "the WebSocket ended")
            if frame.opcode != .pong { return frame }
        }
    }

    static func closeFrame(_ code: UInt16, _ reason: String) -> WebSocketFrame {
        var data = ByteBuffer()
        data.writeInteger(code)
        data.writeString(reason)
        return WebSocketFrame(fin: true, opcode: .connectionClose, maskKey: .random(), data: data)
    }

    static func closeCode(_ frame: WebSocketFrame) -> (UInt16?, String) {
        var data = frame.unmaskedData
        let code = data.readInteger(as: UInt16.self)
        return (code, data.readString(length: data.readableBytes) ?? "")
    }

    /// One text message there and back on `host`, then a normal close.
    static func roundTrip(_ server: RunningLocalServer, host: String) async throws {
        let socket = try await open(server, host: host)
        try await session(socket) { frames, out in
            try await out.write(frame(.text, "round trip".utf8))
            #expect(String(buffer: try await next(&frames).unmaskedData) == "round trip")
            try await out.write(closeFrame(1000, ""))
        }
    }

    // MARK: Relay

    @Test("text, binary, fragmented and ping frames echo byte for byte through the mirror host")
    func echo() async throws {
        try await Self.withEcho { server, mirror, _ in
            let socket = try await Self.open(server, host: mirror)
            try await Self.session(socket) { frames, out in
                try await out.write(Self.frame(.text, "héllo, origin".utf8))
                var got = try await Self.next(&frames)
                #expect(got.opcode == .text && got.fin && String(buffer: got.unmaskedData) == "héllo, origin")

                let binary: [UInt8] = (0..<300).map { UInt8(truncatingIfNeeded: $0 &* 7) }
                try await out.write(Self.frame(.binary, binary))
                got = try await Self.next(&frames)
                #expect(got.opcode == .binary && Array(buffer: got.unmaskedData) == binary)

                // A message in three fragments stays three fragments.
                try await out.write(Self.frame(.text, "one ".utf8, fin: false))
                try await out.write(Self.frame(.continuation, "two ".utf8, fin: false))
                try await out.write(Self.frame(.continuation, "three".utf8))
                var text = ""
                for expected in [(WebSocketOpcode.text, false), (.continuation, false), (.continuation, true)] {
                    got = try await Self.next(&frames)
                    #expect(got.opcode == expected.0 && got.fin == expected.1)
                    text += String(buffer: got.unmaskedData)
                }
                #expect(text == "one two three")

                // The origin answers the page's ping itself.
                try await out.write(Self.frame(.ping, "are you there".utf8))
                let pong = try #require(try await frames.next())
                #expect(pong.opcode == .pong && String(buffer: pong.unmaskedData) == "are you there")
                try await out.write(Self.closeFrame(1000, ""))
            }
            #expect(server.metrics.forwardedRequests(origin: "http://127.0.0.1:\(try #require(MirrorOrigin(mirrorHost: mirror)).port)", statusClass: 1) == 1)
        }
    }

    @Test("a 1 MB binary message passes whole and byte for byte")
    func largeMessage() async throws {
        try await Self.withEcho { server, mirror, _ in
            let socket = try await Self.open(server, host: mirror)
            let bytes = (0..<1_000_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 9) }
            try await Self.session(socket) { frames, out in
                try await out.write(Self.frame(.binary, bytes))
                let got = try await Self.next(&frames)
                #expect(got.opcode == .binary && got.fin)
                #expect(Array(buffer: got.unmaskedData) == bytes)
                try await out.write(Self.closeFrame(1000, ""))
            }
        }
    }

    @Test("a frame over the 4 MiB limit ends the WebSocket with 1009 (message too big), and the origin is closed too")
    func frameTooLarge() async throws {
        try await Self.withEcho { server, mirror, origin in
            let socket = try await Self.open(server, host: mirror)
            try await Self.session(socket) { frames, out in
                try? await out.write(Self.frame(.binary, [UInt8](repeating: 7, count: (4 << 20) + 1)))
                var code: UInt16?
                do {
                    let close = try await Self.next(&frames)
                    if close.opcode == .connectionClose { code = Self.closeCode(close).0 }
                } catch {}
                #expect(code == 1009)
            }
            #expect(origin.entries.filter { $0.hasPrefix("handshake") }.count == 1)
        }
    }

    @Test("the page's subprotocols reach the origin as offered and the origin's choice comes back; path, query, Origin and Cookie are forwarded")
    func handshake() async throws {
        try await Self.withEcho { server, mirror, origin in
            let socket = try await Self.open(server, host: mirror, target: "/live/feed?room=7&x=%2F", headers: [
                ("Sec-WebSocket-Protocol", "chat.v1, chat.v2"), ("Origin", "http://\(mirror):\(server.port)"),
                ("Cookie", "session=abc"), ("Cookie", "theme=dark"), ("Sec-WebSocket-Extensions", "permessage-deflate"),
            ])
            #expect(socket.response.headers["Sec-WebSocket-Protocol"] == ["chat.v2"])
            #expect(socket.response.headers["Sec-WebSocket-Extensions"].isEmpty, "no extension is negotiated")
            try await Self.session(socket) { _, out in try await out.write(Self.closeFrame(1000, "")) }
            #expect(origin.entries.contains("handshake /live/feed?room=7&x=%2F"))
            #expect(origin.handshakeHeader("Sec-WebSocket-Protocol") == ["chat.v1, chat.v2"])
            #expect(origin.handshakeHeader("Origin") == ["http://127.0.0.1:\(origin.port)"])
            #expect(origin.handshakeHeader("Host") == ["127.0.0.1:\(origin.port)"])
            #expect(origin.handshakeHeader("Cookie") == ["session=abc; theme=dark"])
            #expect(origin.handshakeHeader("Sec-WebSocket-Extensions").isEmpty)

            // Offering nothing the origin speaks: no protocol chosen.
            let plain = try await Self.open(server, host: mirror, headers: [("Sec-WebSocket-Protocol", "chat.v1")])
            #expect(plain.response.headers["Sec-WebSocket-Protocol"].isEmpty)
            try await Self.session(plain) { _, out in try await out.write(Self.closeFrame(1000, "")) }
        }
    }

    @Test("close codes and reasons pass both ways")
    func closePropagation() async throws {
        try await Self.withEcho { server, mirror, origin in
            // The page closes: the origin sees its code and reason, and its answer comes back.
            let first = try await Self.open(server, host: mirror)
            try await Self.session(first) { frames, out in
                try await out.write(Self.closeFrame(4000, "page-bye"))
                let reply = try await Self.next(&frames)
                #expect(reply.opcode == .connectionClose)
                #expect(Self.closeCode(reply) == (4000, "page-bye"))
                #expect(try await frames.next() == nil, "the server closes the connection after the close handshake")
            }
            #expect(origin.entries.contains("close 4000 page-bye"))

            // The origin closes: the page gets its code and reason.
            let second = try await Self.open(server, host: mirror)
            try await Self.session(second) { frames, out in
                try await out.write(Self.frame(.text, "close-me:4001:origin-bye".utf8))
                let close = try await Self.next(&frames)
                #expect(close.opcode == .connectionClose)
                #expect(Self.closeCode(close) == (4001, "origin-bye"))
                try await out.write(Self.closeFrame(4001, "origin-bye"))
                #expect(try await frames.next() == nil)
            }
        }
    }

    @Test("the origin dropping the connection drops the page's too")
    func originDrops() async throws {
        let origin = try await WebSocketEchoOrigin.start()
        try await Self.withServe(origin: origin.port) { server, mirror in
            let socket = try await Self.open(server, host: mirror)
            try await Self.session(socket) { frames, out in
                try await out.write(Self.frame(.text, "ping?".utf8))
                _ = try await Self.next(&frames)
                await origin.stop()
                await origin.closeConnections()
                var ended = false
                do { ended = try await frames.next() == nil } catch { ended = true }
                #expect(ended)
            }
        }
    }

    @Test("stopping the server ends its relayed WebSockets instead of waiting for them")
    func serverStop() async throws {
        let origin = try await WebSocketEchoOrigin.start()
        defer { Task { await origin.stop() } }
        let f = LocalStoreFixture()
        try f.add("ws", version: "1.0.0", fixture: nil, files: ["index.html": Array(Self.page.utf8)],
                  whitelist: ["http://127.0.0.1:\(origin.port)/"])
        let server = try await f.start(deviceID: "ws")
        let socket = try await Self.open(server, host: "127.0.0.1.http-\(origin.port).localhost")
        let stopped = ProxyHarness.PortBox()
        Task {
            await server.stop()
            stopped.value = 1
        }
        // The server ends the WebSocket (a close frame, or the connection closed); 5 minutes
        // bound a server that never does (a hang, not a speed).
        let channel = socket.channel.channel
        let endedByServer = try await socket.channel.executeThenClose { inbound, _ in
            await withTaskGroup(of: Bool.self) { group in
                group.addTask {
                    var frames = inbound.makeAsyncIterator()
                    do { while let frame = try await frames.next(), frame.opcode != .connectionClose {} } catch {}
                    return true
                }
                group.addTask {
                    try? await Task.sleep(for: .seconds(300))
                    return false
                }
                let first = await group.next() ?? false
                channel.close(promise: nil)
                group.cancelAll()
                return first
            }
        }
        #expect(endedByServer, "the WebSocket stayed open while the server stopped")
        // Bounded (5 minutes): a server that never stops, not a slow one.
        var finished = false
        for _ in 0..<3000 {
            finished = stopped.value == 1
            if finished { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(finished, "the server did not stop while a WebSocket was open")
    }

    // MARK: Failures and refusals

    /// Sends a WebSocket upgrade as a browser does (no `Connection: close`) and reads the
    /// answer that is not a `101`: its head and `Content-Length` body.
    static func upgrade(
        _ server: RunningLocalServer, _ target: String, host: String, headers: [(String, String)] = upgradeHeaders
    ) async throws -> LocalHTTP.Response {
        try await LocalHTTP.onThread {
            let fd = try LocalHTTP.connect(port: server.port)
            defer { close(fd) }
            var text = "GET \(target) HTTP/1.1\r\nHost: \(host)\r\n"
            for (name, value) in headers { text += "\(name): \(value)\r\n" }
            try LocalHTTP.send(fd, Array((text + "\r\n").utf8))
            var (response, body) = try LocalHTTP.readHead(fd)
            let length = Int(response.header("content-length") ?? "0") ?? 0
            var chunk = [UInt8](repeating: 0, count: 4096)
            while body.count < length {
                let n = recv(fd, &chunk, chunk.count, 0)
                guard n > 0 else { break }
                body += chunk[0..<n]
            }
            response.body = Array(body.prefix(length))
            return response
        }
    }

    static let upgradeHeaders = [
        ("Upgrade", "websocket"), ("Connection", "Upgrade"), ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="), ("Sec-WebSocket-Version", "13"),
    ]

    @Test("an origin nothing listens on: the page's upgrade gets a 502 with the proxy's clear body, counted")
    func originDown() async throws {
        try await ProxyHarness.withRefusingPort { port in
            try await Self.withServe(origin: port) { server, mirror in
                let response = try await Self.upgrade(server, "/ws", host: "\(mirror):\(server.port)", headers: Self.upgradeHeaders)
                #expect(response.status == 502)
                #expect(response.header("connection") == "close", "a failed upgrade ends its connection")
                #expect(response.header("content-type") == "text/plain; charset=utf-8")
                #expect(response.text == "offline-agent: cannot reach http://127.0.0.1:\(port): connection refused\n")
                #expect(server.metrics.originFailures(origin: "http://127.0.0.1:\(port)", reason: "unreachable") == 1)
            }
        }
    }

    @Test("an origin that accepts but never answers the upgrade fails within the handshake timeout, as a timeout")
    func silentOrigin() async throws {
        let listener = try LoopbackListener.silent()
        defer { listener.stop() }
        let origin = try #require(MirrorOrigin(scheme: "http", host: "127.0.0.1", port: listener.port))
        await #expect(throws: OriginWebSocket.Failure.handshakeTimeout) {
            _ = try await OriginWebSocket.connect(
                to: origin, target: "/ws", headers: [:], limits: .init(handshakeTimeout: .seconds(1)),
                group: MultiThreadedEventLoopGroup.singleton)
        }
        let (reason, why) = MirrorWebSocketUpgrade.describe(OriginWebSocket.Failure.handshakeTimeout)
        #expect(reason == "timeout" && why == "no WebSocket within the handshake timeout")
    }

    @Test("an origin that refuses the upgrade: the page gets a 502 saying so, counted")
    func originRefuses() async throws {
        try await Self.withEcho { server, mirror, origin in
            let response = try await Self.upgrade(server, "/refuse", host: "\(mirror):\(server.port)", headers: Self.upgradeHeaders)
            #expect(response.status == 502)
            #expect(response.text == "offline-agent: cannot reach http://127.0.0.1:\(origin.port): the origin refused the WebSocket upgrade\n")
            #expect(server.metrics.originFailures(origin: "http://127.0.0.1:\(origin.port)", reason: "refused") == 1)
        }
    }

    @Test("an upgrade for a host no whitelist names is refused (403) and never reaches the origin, while the mirror's relays")
    func notWhitelisted() async throws {
        try await Self.withEcho { server, mirror, origin in
            for host in ["127.0.0.1.http-\(origin.port &+ 1).localhost", "other.example.localhost", "foo.localhost"] {
                let response = try await Self.upgrade(server, "/ws", host: "\(host):\(server.port)", headers: Self.upgradeHeaders)
                #expect(response.status == 403, "\(host)")
            }
            #expect(origin.entries.isEmpty)
            // While the mirror of the whitelisted origin relays.
            try await Self.roundTrip(server, host: mirror)
            #expect(origin.entries.contains("handshake /ws"))
        }
    }

    @Test("an upgrade on the plain loopback host is not proxied: it gets the plain host's answer, while the mirror's relays")
    func plainHost() async throws {
        try await Self.withEcho { server, mirror, origin in
            for host in ["127.0.0.1:\(server.port)", "localhost:\(server.port)"] {
                let response = try await Self.upgrade(server, "/ws/index.html", host: host, headers: Self.upgradeHeaders)
                #expect(response.status == 200, "\(host): the app route, as without the upgrade")
                #expect(response.text == Self.page)
            }
            #expect(origin.entries.isEmpty)
            try await Self.roundTrip(server, host: mirror)
            #expect(origin.entries.contains("handshake /ws"))
        }
    }

    @Test("an invalid upgrade on a mirror host (no key, another version) is a 400, not forwarded as plain HTTP")
    func invalidUpgrade() async throws {
        try await Self.withEcho { server, mirror, origin in
            let cases: [[(String, String)]] = [
                Self.upgradeHeaders.map { $0.0 == "Sec-WebSocket-Version" ? ($0.0, "8") : $0 },
                Self.upgradeHeaders.filter { $0.0 != "Sec-WebSocket-Key" },
            ]
            for headers in cases {
                let response = try await Self.upgrade(server, "/ws", host: "\(mirror):\(server.port)", headers: headers)
                #expect(response.status == 400, "\(headers)")
                #expect(response.text.hasPrefix("bad request: not a valid WebSocket upgrade"))
            }
            #expect(origin.entries.isEmpty)
        }
    }
}
