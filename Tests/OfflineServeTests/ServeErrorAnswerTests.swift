import Foundation
#if canImport(Glibc)
import Glibc
#endif
import OfflineAgent
@testable import OfflineServe
import Testing
import TestSupport

/// Every error answer of `serve`, wherever on the connection it is decided (the decoder,
/// the upgrade filter, the router, the responder, the proxy), has one shape
/// (`LocalErrorAnswer`): a text or JSON body of one line, its exact `Content-Length`,
/// `Cache-Control: no-store`, and `Connection: close` when the connection ends with it.
/// Sent as raw requests, each on a connection of its own. (The `405` to `CONNECT` is not
/// among them: NIO's encoder frames every answer to `CONNECT` without a body.)
@Suite("serve's error answers")
struct ServeErrorAnswerTests {
    struct Case: Sendable, CustomTestStringConvertible {
        let name: String
        /// The request; `HOST` stands for the plain host, `MIRROR` for the mirror host of an
        /// origin that accepts and never answers, `REFUSED` for one of an origin that refuses
        /// connections.
        let request: String
        let status: Int
        let json: Bool
        let closes: Bool
        var testDescription: String { name }
    }

    static let key = "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"

    static let cases: [Case] = [
        Case(name: "undecodable request line", request: "GARBAGE\r\n\r\n", status: 400, json: false, closes: true),
        Case(name: "two Host lines", request: "GET / HTTP/1.1\r\nHost: HOST\r\nHost: HOST\r\n\r\n", status: 400, json: false, closes: true),
        Case(name: "a .localhost name that mirrors nothing", request: "GET / HTTP/1.1\r\nHost: nowhere.localhost\r\n\r\n",
             status: 403, json: false, closes: true),
        Case(name: "an unknown app", request: "GET /nosuchapp/x HTTP/1.1\r\nHost: HOST\r\n\r\n", status: 404, json: false, closes: false),
        Case(name: "lifecycle control on the plain host", request: "POST /.offline-agent/mark-good HTTP/1.1\r\nHost: HOST\r\nContent-Length: 0\r\n\r\n",
             status: 404, json: true, closes: false),
        Case(name: "an origin that refuses the connection", request: "GET /api HTTP/1.1\r\nHost: REFUSED\r\n\r\n", status: 502, json: false, closes: false),
        Case(name: "a broken upload body", request: "POST /api HTTP/1.1\r\nHost: MIRROR\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
             status: 400, json: false, closes: true),
        Case(name: "an invalid WebSocket upgrade", request: "GET /ws HTTP/1.1\r\nHost: MIRROR\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
             status: 400, json: false, closes: true),
        Case(name: "a WebSocket the origin gives none of", request: "GET /ws HTTP/1.1\r\nHost: REFUSED\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\(key)\r\n",
             status: 502, json: false, closes: true),
        Case(name: "a valid WebSocket upgrade that is not the connection's first request",
             request: "GET /nosuchapp/x HTTP/1.1\r\nHost: HOST\r\n\r\n"
                 + "GET /ws HTTP/1.1\r\nHost: MIRROR\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\(key)\r\n",
             status: 400, json: false, closes: true),
    ]

    @Test("every error answer has one shape: a one-line body, its exact length, no-store, and the close when it ends the connection",
          arguments: cases)
    func shape(_ expected: Case) async throws {
        let silent = try LoopbackListener.silent()
        defer { silent.stop() }
        try await ProxyHarness.withRefusingPort { port in
            let refused = MirrorOrigin(scheme: "http", host: "127.0.0.1", port: port)!
            let mirrored = MirrorOrigin(scheme: "http", host: "127.0.0.1", port: silent.port)!
            let fixture = LocalStoreFixture()
            try fixture.add("proxied", version: "1.0.0", fixture: nil, whitelist: [refused, mirrored].map { "\($0.origin)/never-requested/" })
            var settings = LocalServer.Configuration(root: fixture.root.path, port: 0, deviceID: "device")
            settings.origins = ProxyHarness.patient
            let server = try await LocalServer(configuration: settings, logger: ProxyHarness.quietLogger).start()
            defer { withExtendedLifetime(fixture) {} }
            let request = expected.request.replacingOccurrences(of: "MIRROR", with: "\(mirrored.mirrorHost):\(server.port)")
                .replacingOccurrences(of: "REFUSED", with: "\(refused.mirrorHost):\(server.port)")
                .replacingOccurrences(of: "HOST", with: "127.0.0.1:\(server.port)")
            // The last answer on the connection is the one the case is about (a pipelined
            // request before it gets its own answer first).
            let answers: [LocalHTTP.Response]
            do {
                answers = try await Self.answers(port: server.port, request, count: request.components(separatedBy: "HTTP/1.1\r\n").count - 1)
            } catch {
                await server.stop()
                throw error
            }
            await server.stop()
            let answer = try #require(answers.last)
            #expect(answer.status == expected.status, "\(answer.text)")
            #expect(answer.header("content-type") == (expected.json ? "application/json" : "text/plain; charset=utf-8"))
            #expect(answer.header("content-length") == String(answer.body.count))
            #expect(answer.header("cache-control") == "no-store")
            #expect((answer.header("connection") == "close") == expected.closes, "\(answer.headers)")
            #expect(answer.text.hasSuffix("\n") && answer.text.dropLast().contains("\n") == false, "\(answer.text)")
            if expected.json { #expect(answer.text.hasPrefix("{\"error\":")) }
        }
    }

    /// The first `count` answers on a new connection after `request` (at least one; the
    /// request line that does not parse counts as one request), each read to its
    /// `Content-Length`; bounded by the socket's timeout.
    static func answers(port: Int, _ request: String, count: Int) async throws -> [LocalHTTP.Response] {
        try await LocalHTTP.onThread {
            let fd = try LoopbackSocket.connect(port: port, timeout: 60)
            defer { close(fd) }
            try LocalHTTP.send(fd, Array(request.utf8))
            var answers: [LocalHTTP.Response] = [], data: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 4096)
            func receive() throws {
                let n = recv(fd, &chunk, chunk.count, 0)
                guard n > 0 else { throw LocalHTTP.Failure(description: "closed after \(answers.count) answers: \(data.count) bytes") }
                data += chunk[..<n]
            }
            for _ in 0..<max(1, count) {
                while data.firstRange(of: Array("\r\n\r\n".utf8)) == nil { try receive() }
                var answer = try LocalHTTP.parse(data)
                let length = Int(answer.header("content-length") ?? "0") ?? 0
                data = answer.body
                while data.count < length { try receive() }
                answer.body = Array(data.prefix(length))
                data.removeFirst(length)
                answers.append(answer)
            }
            return answers
        }
    }
}
