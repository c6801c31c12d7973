import Foundation
import NIOCore
import NIOHTTP1
import OfflineHTTP
import Testing
@testable import OfflineAgent
@testable import OfflineServe
#if canImport(Glibc)
import Glibc
import TestSupport
#endif

/// Warm package files are answered on the event loop (`LocalImmediateResponder`): the
/// same responses as Hummingbird's responder makes, in request order on a connection
/// that mixes both, with `Connection: close` and request bodies handled as before.
@Suite("Serve immediate responses")
struct ServeImmediateTests {
    typealias F = LocalStoreFixture

    /// Headers as a comparable list, without `Date` (the one that may differ by a second).
    static func headers(_ response: LocalHTTP.Response) -> [String] {
        response.headers.filter { $0.key != "date" }.map { "\($0.key): \($0.value)" }.sorted()
    }

    @Test("a warm file is answered on the event loop with the response its cold request got")
    func warmMatchesCold() async throws {
        let f = try LocalServerTests.mall()
        try await withLocalServer(f) { server in
            for path in ["index.html", "js/app.js", "big.bin", "empty.txt", "pages/"] {
                let before = server.metrics.immediateResponses
                let cold = try await LocalHTTP.request(port: server.port, "/mall/\(path)")
                #expect(server.metrics.immediateResponses == before, "\(path): the first request has nothing kept to answer from")
                let warm = try await LocalHTTP.request(port: server.port, "/mall/\(path)")
                #expect(server.metrics.immediateResponses == before + 1, "\(path): not answered on the event loop")
                #expect(cold.status == 200 && warm.status == 200, "\(path)")
                #expect(Self.headers(warm) == Self.headers(cold), "\(path)")
                #expect(warm.body == cold.body, "\(path)")
                #expect(warm.header("date")?.hasSuffix(" GMT") == true, "\(path): no Date")
            }
            // Conditional, range and HEAD requests of a warm file: answered there too.
            let etag = try #require(try await LocalHTTP.request(port: server.port, "/mall/js/app.js").header("etag"))
            let before = server.metrics.immediateResponses
            let same = try await LocalHTTP.request(port: server.port, "/mall/js/app.js", headers: [("If-None-Match", etag)])
            #expect(same.status == 304 && same.body.isEmpty)
            let part = try await LocalHTTP.request(port: server.port, "/mall/js/app.js", headers: [("Range", "bytes=2-5")])
            #expect(part.status == 206 && part.body == Array(F.fixtureBytes("1.0.0", "js/app.js")[2...5]))
            #expect(part.header("content-range") == "bytes 2-5/\(F.fixtureBytes("1.0.0", "js/app.js").count)")
            let head = try await LocalHTTP.request(port: server.port, "/mall/js/app.js", method: "HEAD")
            #expect(head.status == 200 && head.body.isEmpty)
            #expect(head.header("content-length") == String(F.fixtureBytes("1.0.0", "js/app.js").count))
            #expect(server.metrics.immediateResponses == before + 3)
            #expect(server.metrics.fileResponses(app: "mall", code: 304) == 1)
            #expect(server.metrics.fileResponses(app: "mall", code: 206) == 1)
        }
    }

    @Test("a warm file on a mirror host is answered on the event loop as the package's")
    func warmMirror() async throws {
        let f = try MirrorRoutingTests.store()
        try await withLocalServer(f) { server in
            let cold = try await MirrorRoutingTests.get(server, "/assets/index.js")
            let before = server.metrics.immediateResponses
            let warm = try await MirrorRoutingTests.get(server, "/assets/index.js")
            #expect(server.metrics.immediateResponses == before + 1)
            #expect(warm.status == 200 && warm.header("x-offline-source") == "package")
            #expect(Self.headers(warm) == Self.headers(cold))
            #expect(warm.text == "console.log('spa')")
            #expect(server.metrics.offlineHits(app: "spa") == 2)
        }
    }

    @Test("a swap and a rollback are seen by the next request to a warm file")
    func warmSeesChanges() async throws {
        let f = try LocalServerTests.mall()
        try await withLocalServer(f) { server in
            _ = try await LocalHTTP.request(port: server.port, "/mall/index.html")
            let warm = try await LocalHTTP.request(port: server.port, "/mall/index.html")
            #expect(warm.header("x-offline-version") == "1.0.0")
            try f.add(version: "1.1.0", files: ["index.html": Array("<p>1.1.0</p>".utf8)])
            let swapped = try await LocalHTTP.request(port: server.port, "/mall/index.html")
            #expect(swapped.header("x-offline-version") == "1.1.0" && swapped.text == "<p>1.1.0</p>")
            // Warm again, then marked bad: rolled back to 1.0.0, which the next request gets.
            _ = try await LocalHTTP.request(port: server.port, "/mall/index.html")
            _ = try Lifecycle(store: f.store).markBad("mall", reason: "test")
            let back = try await LocalHTTP.request(port: server.port, "/mall/index.html")
            #expect(back.header("x-offline-version") == "1.0.0" && back.body == F.fixtureBytes("1.0.0", "index.html"))
        }
    }

    /// Reads `count` responses with a `Content-Length` each, then whether the server closed the connection.
    /// `count` responses from `fd`, then (`awaitClose`) whether it closed with nothing more.
    static func responses(_ fd: Int32, count: Int, awaitClose: Bool = true) throws -> (responses: [LocalHTTP.Response], closed: Bool) {
        let (raw, closed) = try rawResponses(fd, count: count, awaitClose: awaitClose)
        return (try raw.map(LocalHTTP.parse), closed)
    }

    /// `responses`, each as the bytes it came in.
    static func rawResponses(_ fd: Int32, count: Int, awaitClose: Bool = true) throws -> (responses: [[UInt8]], closed: Bool) {
        var data: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        var responses: [[UInt8]] = []
        while responses.count < count {
            if let end = data.firstRange(of: Array("\r\n\r\n".utf8))?.upperBound {
                let head = try LocalHTTP.parse(Array(data[..<end]))
                let length = Int(head.header("content-length") ?? "0") ?? 0
                if data.count >= end + length {
                    responses.append(Array(data[..<(end + length)]))
                    data.removeFirst(end + length)
                    continue
                }
            }
            let n = recv(fd, &chunk, chunk.count, 0)
            guard n > 0 else { throw LocalHTTP.Failure(description: "closed after \(responses.count) responses") }
            data += chunk[0..<n]
        }
        guard awaitClose else { return (responses, false) }
        let (closed, extra) = HostileSocket.waitForClose(fd, until: .now + .seconds(2))
        #expect(extra.isEmpty && data.isEmpty, "bytes after the last response")
        return (responses, closed)
    }

    @Test("a plain GET of a warm file is answered from its raw bytes, as after decoding to the byte; the others after decoding, in turn")
    func beforeDecoding() async throws {
        let f = try LocalServerTests.mall()
        try await withLocalServer(f) { server in
            let port = server.port
            _ = try await LocalHTTP.request(port: port, "/mall/js/app.js")
            let get = "GET /mall/js/app.js HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nAccept: */*\r\n"
            let requests = [
                get + "\r\n",
                // A Connection value other than keep-alive: decoded first, as is a cold file.
                get + "Connection: keep-alive, TE\r\n\r\n",
                "GET /mall/css/app.css HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n\r\n",
                get + "Connection: keep-alive\r\n\r\n",
            ]
            let (immediate, raw) = (server.metrics.immediateResponses, server.metrics.responsesBeforeDecoding)
            let metrics = server.metrics
            let (responses, counts) = try await LocalHTTP.onThread {
                let fd = try LocalHTTP.connect(port: port)
                defer { close(fd) }
                var responses: [[UInt8]] = [], counts: [Int] = []
                for request in requests {
                    try LocalHTTP.send(fd, Array(request.utf8))
                    responses += try Self.rawResponses(fd, count: 1, awaitClose: false).responses
                    counts.append(metrics.responsesBeforeDecoding - raw)
                }
                return (responses, counts)
            }
            #expect(try responses.map { try LocalHTTP.parse($0).status } == [200, 200, 200, 200])
            #expect(counts == [1, 1, 1, 2], "answered before decoding, after each request")
            #expect(server.metrics.immediateResponses == immediate + 3)
            // The same bytes either way, but for the Date line (it may fall in another second).
            let withoutDate = { (bytes: [UInt8]) in
                String(decoding: bytes, as: UTF8.self).split(separator: "\r\n", omittingEmptySubsequences: false).filter { !$0.hasPrefix("Date: ") }
            }
            #expect(withoutDate(responses[0]) == withoutDate(responses[1]))
            #expect(withoutDate(responses[3]) == withoutDate(responses[0]))
            #expect(try LocalHTTP.parse(responses[0]).body == F.fixtureBytes("1.0.0", "js/app.js"))
            #expect(String(decoding: responses[0], as: UTF8.self).contains("\r\nDate: "))
        }
    }

    /// Changes of the store that a loop's memo (`LocalWholeFileMemo`) must not outlive, one
    /// after the other, each with what the next `GET /mall/js/app.js` gets after it.
    struct MemoChange: Sendable, CustomTestStringConvertible {
        struct Step: Sendable {
            var apply: @Sendable (LocalStoreFixture) throws -> Void
            var status: Int
            var body: [UInt8]
        }
        var name: String
        var steps: [Step]
        var testDescription: String { name }
    }

    static let memoChanges: [MemoChange] = {
        let js = F.fixtureBytes("1.0.0", "js/app.js"), next = Array("console.log('1.1.0')".utf8)
        let swap = MemoChange.Step(apply: { try $0.add(version: "1.1.0", files: ["js/app.js": next]) }, status: 200, body: next)
        let markBad = MemoChange.Step(apply: { _ = try Lifecycle(store: $0.store).markBad("mall", reason: "test") }, status: 200, body: js)
        return [MemoChange(name: "a new version swapped in, then marked bad and rolled back", steps: [swap, markBad])]
            + ServeKillSwitchTests.changes.map { change in
                MemoChange(name: change.name, steps: [.init(apply: change.on, status: 302, body: []), .init(apply: change.off, status: 200, body: js)])
            }
    }()

    @Test("answers given again from a loop's memo; a change of the store is seen by the next request on the connection",
          arguments: memoChanges)
    func memoSeesChanges(change: MemoChange) async throws {
        let f = try LocalServerTests.mall()
        // A watch of its own: the process's moves with every other test's writes, and then
        // nothing is given again.
        var configuration = LocalServer.Configuration(root: f.root.path, port: 0, deviceID: "device")
        configuration.storeWatch = LocalStoreWatch()
        let server = try await LocalServer(configuration: configuration).start()
        do {
            let port = server.port
            _ = try await LocalHTTP.request(port: port, "/mall/js/app.js")
            let get = Array("GET /mall/js/app.js HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n\r\n".utf8)
            let metrics = server.metrics
            try await LocalHTTP.onThread {
                let fd = try LocalHTTP.connect(port: port)
                defer { close(fd) }
                func next() throws -> LocalHTTP.Response {
                    try LocalHTTP.send(fd, get)
                    return try Self.responses(fd, count: 1, awaitClose: false).responses[0]
                }
                let (raw, repeated) = (metrics.responsesBeforeDecoding, metrics.repeatedResponses)
                for _ in 0..<3 {
                    let response = try next()
                    #expect(response.status == 200 && response.body == F.fixtureBytes("1.0.0", "js/app.js"))
                }
                // One connection is one loop: the first made the answer, the next two had it again.
                #expect(metrics.responsesBeforeDecoding == raw + 3 && metrics.repeatedResponses == repeated + 2)
                for (index, step) in change.steps.enumerated() {
                    try step.apply(f)
                    // The next request, and those after it (made again once the change's
                    // checks hold, then given again from the memo).
                    for request in 0..<4 {
                        let response = try next()
                        #expect(response.status == step.status && response.body == step.body, "\(change.name): step \(index), request \(request)")
                    }
                }
            }
        } catch {
            await server.stop()
            throw error
        }
        await server.stop()
    }

    @Test("a memo gives an answer back only for the generation it held for, and starts again empty past its bounds")
    func memoBounds() throws {
        let memo = LocalWholeFileMemo()
        let metrics = LocalServerMetrics()
        let headers = HTTPHeaders([("Content-Length", "4")])
        func answer(_ size: Int, heldFor: UInt64?) -> LocalServerResponder.WholeFileAnswer {
            let validators = LocalFileCache.Validators(
                inode: 1, size: Int64(size), seconds: 0, nanoseconds: 0, recordModified: 0, modified: 0, etag: "e", lastModified: "m")
            let content = LocalFileCache.Content(
                record: FileFingerprint(stat()), body: ByteBuffer(repeating: 1, count: size), validators: validators, wholeHeaders: headers)
            return .init(content: content, mirrored: false, series: metrics.wholeFileSeries(app: "mall", mirrored: false), heldFor: heldFor)
        }
        // Checked on every request (nil), or made across a change (another generation): never kept.
        memo.keep(answer(4, heldFor: nil), host: "h", path: "/a", generation: 3)
        memo.keep(answer(4, heldFor: 4), host: "h", path: "/a", generation: 3)
        #expect(memo.answer(host: "h", path: "/a", generation: 3) == nil)
        memo.keep(answer(4, heldFor: 3), host: "h", path: "/a", generation: 3)
        #expect(memo.answer(host: "h", path: "/a", generation: 3)?.content.body.readableBytes == 4)
        #expect(memo.answer(host: "H", path: "/a", generation: 3) == nil && memo.answer(host: "h", path: "/b", generation: 3) == nil)
        // A new generation drops everything.
        #expect(memo.answer(host: "h", path: "/a", generation: 4) == nil)
        #expect(memo.count == 0 && memo.answer(host: "h", path: "/a", generation: 3) == nil)
        for index in 0..<LocalWholeFileMemo.limit {
            memo.keep(answer(1, heldFor: 5), host: "h", path: "/\(index)", generation: 5)
        }
        #expect(memo.count == LocalWholeFileMemo.limit)
        memo.keep(answer(1, heldFor: 5), host: "h", path: "/over", generation: 5)
        #expect(memo.count == 1 && memo.answer(host: "h", path: "/over", generation: 5) != nil)
        let half = LocalWholeFileMemo.byteLimit / 2 + 1
        memo.keep(answer(half, heldFor: 5), host: "h", path: "/big", generation: 5)
        memo.keep(answer(half, heldFor: 5), host: "h", path: "/bigger", generation: 5)
        #expect(memo.count == 1 && memo.answer(host: "h", path: "/bigger", generation: 5) != nil)
        // Keys count too: long Host values and paths with empty bodies fill it as well.
        let long = String(repeating: "a", count: LocalWholeFileMemo.byteLimit / 4)
        #expect(memo.answer(host: "h", path: "/over", generation: 6) == nil && memo.count == 0)
        for index in 0..<3 { memo.keep(answer(0, heldFor: 6), host: long, path: "/\(index)", generation: 6) }
        #expect(memo.count == 3)
        // A fourth key of a quarter of the bound passes it.
        memo.keep(answer(0, heldFor: 6), host: long, path: "/3", generation: 6)
        #expect(memo.count == 1 && memo.answer(host: long, path: "/3", generation: 6) != nil)
    }

    /// Sends `text` on one connection and reads `count` responses, then whether it closed.
    static func exchange(port: Int, _ text: String, count: Int) async throws -> (responses: [LocalHTTP.Response], closed: Bool) {
        try await LocalHTTP.onThread {
            let fd = try LocalHTTP.connect(port: port)
            defer { close(fd) }
            try LocalHTTP.send(fd, Array(text.utf8))
            return try responses(fd, count: count)
        }
    }

    @Test("a connection whose requests were all answered before decoding is closed by a graceful stop")
    func stopClosesUndecodedConnection() async throws {
        let f = try LocalServerTests.mall()
        let server = try await f.start()
        _ = try await LocalHTTP.request(port: server.port, "/mall/js/app.js")
        let port = server.port
        let fd = try await LocalHTTP.onThread { () -> Int32 in
            let fd = try LocalHTTP.connect(port: port)
            try LocalHTTP.send(fd, Array("GET /mall/js/app.js HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8))
            _ = try Self.rawResponses(fd, count: 1, awaitClose: false)
            return fd
        }
        defer { close(fd) }
        #expect(server.metrics.responsesBeforeDecoding == 1)
        // Nothing but this handler saw a request: no HTTP pipeline was built to close it.
        async let stopped: Void = server.stop()
        let (closed, extra) = try await LocalHTTP.onThread { HostileSocket.waitForClose(fd, until: .now + .seconds(10)) }
        #expect(closed && extra.isEmpty, "the connection stayed open through a graceful stop")
        await stopped
    }

    @Test("a client that ends its side after requests answered before decoding gets every answer, then the close")
    func halfCloseAfterUndecoded() async throws {
        let f = try LocalServerTests.mall()
        try await withLocalServer(f) { server in
            _ = try await LocalHTTP.request(port: server.port, "/mall/js/app.js")
            let get = "GET /mall/js/app.js HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
            let (sent, received, closed) = try await OriginProxyTests.raw(port: server.port, bytes: Array((get + get).utf8), halfClose: true, timeout: 10)
            #expect(sent && closed, "the connection was not closed after the client's end")
            #expect(received.components(separatedBy: "HTTP/1.1 200 OK\r\n").count == 3)
            #expect(received.hasSuffix(String(decoding: F.fixtureBytes("1.0.0", "js/app.js"), as: UTF8.self)))
            #expect(server.metrics.responsesBeforeDecoding == 2)
        }
    }

    @Test("a client that ends its side while answers made before decoding are still being written gets all of them")
    func halfCloseWhileWriting() async throws {
        let f = try LocalServerTests.mall()
        try await withLocalServer(f) { server in
            let port = server.port
            _ = try await LocalHTTP.request(port: port, "/mall/js/app.js")
            let get = Array("GET /mall/js/app.js HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8)
            let (responses, closed) = try await LocalHTTP.onThread {
                // A small window: most of the two answers (each under the channel's write limit) wait
                // in the server when the end comes.
                let fd = try LocalHTTP.connect(port: port, receiveBuffer: 4096)
                defer { close(fd) }
                try LocalHTTP.send(fd, get + get)
                shutdown(fd, Int32(SHUT_WR))
                usleep(300_000)
                return try Self.rawResponses(fd, count: 2)
            }
            let body = F.fixtureBytes("1.0.0", "js/app.js")
            #expect(try responses.map { try LocalHTTP.parse($0).body } == [body, body])
            #expect(closed, "the connection was not closed after the answers")
            #expect(server.metrics.responsesBeforeDecoding == 2)
        }
    }

    @Test("pipelined requests mixing warm files and other routes are answered in order; Connection: close ends it")
    func pipelined() async throws {
        let f = try LocalServerTests.mall()
        try await withLocalServer(f) { server in
            let port = server.port
            for path in ["index.html", "js/app.js"] { _ = try await LocalHTTP.request(port: port, "/mall/\(path)") }
            let host = "Host: 127.0.0.1:\(port)\r\n"
            let text = "GET /mall/js/app.js HTTP/1.1\r\n\(host)\r\n"
                + "GET /metrics HTTP/1.1\r\n\(host)\r\n"
                + "GET /mall/index.html HTTP/1.1\r\n\(host)\r\n"
                + "GET /mall/css/app.css HTTP/1.1\r\n\(host)\r\n"
                + "GET /mall/js/app.js HTTP/1.1\r\n\(host)Connection: close\r\n\r\n"
                + "GET /mall/index.html HTTP/1.1\r\n\(host)\r\n"
            let raw = server.metrics.responsesBeforeDecoding
            let (responses, closed) = try await Self.exchange(port: port, text, count: 5)
            #expect(responses.map(\.status) == [200, 200, 200, 200, 200])
            // Only the first: each one after /metrics waits for the one before it.
            #expect(server.metrics.responsesBeforeDecoding == raw + 1)
            #expect(responses[0].body == F.fixtureBytes("1.0.0", "js/app.js"))
            #expect(responses[1].header("content-type")?.hasPrefix("text/plain; version=0.0.4") == true)
            #expect(responses[2].body == F.fixtureBytes("1.0.0", "index.html"))
            #expect(responses[3].body == F.fixtureBytes("1.0.0", "css/app.css"))
            #expect(responses[4].body == F.fixtureBytes("1.0.0", "js/app.js"))
            #expect(closed, "the connection stayed open after Connection: close")
        }
    }

    @Test("one connection's requests naming different hosts are each routed by their own Host")
    func hostChangesOnOneConnection() async throws {
        let f = try MirrorRoutingTests.store()
        try await withLocalServer(f) { server in
            let port = server.port
            _ = try await MirrorRoutingTests.get(server, "/assets/index.js")
            _ = try await LocalHTTP.request(port: port, "/mall/index.html")
            // The connection keeps the last `Host` parsed (`LocalHostAuthority`); each new one
            // must be parsed again. One request at a time, so each may be answered on the loop.
            let hosts = ["\(MirrorRoutingTests.mirror):\(port)", "127.0.0.1:\(port)", "evil.example:\(port)", "\(MirrorRoutingTests.mirror):\(port)"]
            let targets = ["/assets/index.js", "/mall/index.html", "/assets/index.js", "/assets/index.js"]
            let responses = try await LocalHTTP.onThread {
                let fd = try LocalHTTP.connect(port: port)
                defer { close(fd) }
                var responses: [LocalHTTP.Response] = []
                for (host, target) in zip(hosts, targets) {
                    try LocalHTTP.send(fd, Array("GET \(target) HTTP/1.1\r\nHost: \(host)\r\n\r\n".utf8))
                    responses += try Self.responses(fd, count: 1, awaitClose: false).responses
                }
                return responses
            }
            #expect(responses.map(\.status) == [200, 200, 403, 200])
            // All but the 403 before decoding (the warm-up requests ask to close, so are decoded).
            #expect(server.metrics.responsesBeforeDecoding == 3)
            #expect(responses[0].text == "console.log('spa')" && responses[0].header("x-offline-source") == "package")
            #expect(responses[1].body == F.fixtureBytes("1.0.0", "index.html") && responses[1].header("x-offline-source") == nil)
            // Given again from the loop's memo (while no other test moved the shared watch), as first made.
            #expect(responses[3].text == "console.log('spa')" && responses[3].header("x-offline-source") == "package")
        }
    }

    @Test("a warm GET with a body: the body is read past and the next request is answered", arguments: [false, true])
    func bodyReadPast(chunked: Bool) async throws {
        let f = try LocalServerTests.mall()
        try await withLocalServer(f) { server in
            let port = server.port
            _ = try await LocalHTTP.request(port: port, "/mall/index.html")
            let before = server.metrics.immediateResponses
            let body = chunked ? "Transfer-Encoding: chunked\r\n\r\n5\r\nGET /\r\n0\r\n\r\n" : "Content-Length: 5\r\n\r\nGET /"
            let text = "GET /mall/index.html HTTP/1.1\r\nHost: 127.0.0.1\r\n\(body)"
                + "GET /mall/index.html HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
                // After the close: never answered.
                + "GET /mall/index.html HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
            let (responses, closed) = try await Self.exchange(port: port, text, count: 2)
            #expect(responses.map(\.status) == [200, 200])
            #expect(responses.allSatisfy { $0.body == F.fixtureBytes("1.0.0", "index.html") })
            #expect(closed)
            #expect(server.metrics.immediateResponses == before + 2)
        }
    }
}
