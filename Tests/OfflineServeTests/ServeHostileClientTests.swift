import Foundation
import Testing
@testable import OfflineAgent
@testable import OfflineServe
#if canImport(Glibc)
import Glibc
import TestSupport
#endif

/// `offline-agent serve` survives clients that open connections and never finish a
/// request, trickle, idle, stop reading, or send two `Host` lines.
///
/// Serialized: a flood holds over a thousand descriptors of this process, which the
/// other suites' servers and clients share; one flood at a time keeps them clear of the limit.
@Suite("ServeHostileClient", .serialized)
struct ServeHostileClientTests {
    typealias F = LocalStoreFixture
    static let index = F.fixtureBytes("1.0.0", "index.html")

    /// Short timeouts and a small cap, so the tests see them act.
    static func start(
        _ f: LocalStoreFixture, maxConnections: Int = 64, header: Duration = .seconds(1), idle: Duration = .seconds(1),
        allowRemote: Bool = false, origins: OriginProxy.Configuration = OriginProxy.Configuration()
    ) async throws -> RunningLocalServer {
        var configuration = LocalServer.Configuration(
            root: f.root.path, port: 0, deviceID: "device", allowRemote: allowRemote, maxConnections: maxConnections,
            headerTimeout: header, idleTimeout: idle)
        configuration.origins = origins
        return try await LocalServer(configuration: configuration).start()
    }

    /// Polls (bounded) until a normal request is answered 200 with the file.
    /// The bound is on a server that never recovers, not a speed: generous for a loaded machine.
    static func servedAgain(port: Int, within: Duration = .seconds(120)) async throws -> Bool {
        let deadline = ContinuousClock.now + within
        while ContinuousClock.now < deadline {
            let response = try await LocalHTTP.onThread { HostileSocket.tryRequest(port: port) }
            if let response, response.status == 200, response.body == index { return true }
            try await Task.sleep(for: .milliseconds(100))
        }
        return false
    }

    // MARK: Connection floods

    @Test("a flood of half-sent requests above the cap: each new one takes an idle one's slot, the rest time out, then normal requests are served",
          arguments: [
              ("connect, send nothing", ""),
              ("half a head", "GET /mall/index.html HTTP/1.1\r\nHost: 127.0.0.1\r\n"),
              ("one byte", "G"),
          ])
    func flood(label: String, partial: String) async throws {
        let count = DescriptorFlood.budget(1200, serverInProcess: true)
        try #require(count > 4 * 64, "descriptor limit too low for the flood")
        let f = try LocalServerTests.mall()
        let server = try await Self.start(f, maxConnections: 64)
        let port = server.port
        // One flood at a time (see DescriptorFlood).
        let (fds, open) = try await DescriptorFlood.during { () async throws -> ([Int32], Int) in
            let fds = try await LocalHTTP.onThread { () -> [Int32] in
                var fds: [Int32] = []
                for _ in 0..<count {
                    guard let fd = HostileSocket.connect(port: port) else { continue }
                    if !partial.isEmpty { _ = HostileSocket.send(fd, partial) }
                    fds.append(fd)
                }
                return fds
            }
            // The server lets go of every one: closed for a newer one beyond the cap, timed out within it.
            let open = try await LocalHTTP.onThread { () -> Int in
                // 300× the 1 s timeouts: a bound on connections never let go, not a speed.
                let deadline = ContinuousClock.now + .seconds(300)
                var open = 0
                for fd in fds {
                    if !HostileSocket.waitForClose(fd, until: deadline).closed { open += 1 }
                    close(fd)
                }
                return open
            }
            return (fds, open)
        }
        #expect(fds.count > count / 2, "\(label): only \(fds.count) of \(count) connected")
        #expect(open == 0, "\(label): \(open) hostile connections still open")
        #expect(server.metrics.evictedConnections > 0, "\(label): nothing closed for a newer connection at the cap")
        #expect(server.metrics.timedOutConnections(.header) > 0)
        #expect(try await Self.servedAgain(port: port), "\(label): not served after the flood")
        await server.stop()
    }

    @Test("hostile connections that go away free their slots at once")
    func floodGone() async throws {
        _ = HostileSocket.raiseDescriptorLimit(to: 8192)
        let f = try LocalServerTests.mall()
        // Long timeouts: only the clients closing frees the slots.
        let server = try await Self.start(f, maxConnections: 32, header: .seconds(600), idle: .seconds(600))
        let port = server.port
        let fds = try await LocalHTTP.onThread { (0..<32).compactMap { _ in HostileSocket.connect(port: port) } }
        try #require(fds.count == 32)
        // Bounded by 2 minutes (a hang, not a speed), as below.
        for _ in 0..<12_000 where server.metrics.openConnections < 32 { try await Task.sleep(for: .milliseconds(10)) }
        #expect(server.metrics.openConnections == 32)
        for fd in fds { close(fd) }
        #expect(try await Self.servedAgain(port: port))
        for _ in 0..<12_000 where server.metrics.openConnections > 0 { try await Task.sleep(for: .milliseconds(10)) }
        #expect(server.metrics.openConnections == 0, "slots leaked")
        await server.stop()
    }

    @Test("serve under the default descriptor limit survives 1200 half-sent requests (CLI)")
    func cliFlood() async throws {
        let count = DescriptorFlood.budget(1200, serverInProcess: false)
        try #require(count >= 1100, "descriptor limit too low for the flood")
        let f = try LocalServerTests.mall()
        // The server gets 1024 descriptors, a common default, and its default settings.
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/prlimit")
        process.arguments = ["--nofile=1024:1024", CLI.binary, "serve", "--root", f.root.path, "--port", "0", "--device-id", "d"]
        let running = CLI.Running(process: process)
        process.standardOutput = running.out
        process.standardError = running.err
        try process.run()
        var stopped = false
        defer { if !stopped { kill(process.processIdentifier, SIGKILL) } }
        let line = try await LocalHTTP.onThread { () -> String in
            var data = Data()
            while !data.contains(UInt8(ascii: "\n")) {
                let chunk = running.out.fileHandleForReading.readSomeRetryingInterrupts()
                if chunk.isEmpty { break }
                data += chunk
            }
            return String(decoding: data, as: UTF8.self)
        }
        let match = try #require(line.firstMatch(of: /listening on http:\/\/127\.0\.0\.1:([0-9]+)/), "stdout: \(line)")
        let port = try #require(Int(match.1))
        // One flood at a time (see DescriptorFlood).
        let (connected, recovered) = try await DescriptorFlood.during { () async throws -> (Int, Bool) in
            let fds = try await LocalHTTP.onThread { () -> [Int32] in
                (0..<count).compactMap { _ in
                    guard let fd = HostileSocket.connect(port: port, timeout: 2) else { return nil }
                    _ = HostileSocket.send(fd, "GET /mall/index.html HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                    return fd
                }
            }
            defer { for fd in fds { close(fd) } }
            // The hostile sockets stay open on this side: the server must recover by itself.
            return (fds.count, try await Self.servedAgain(port: port))
        }
        #expect(connected > 1024, "only \(connected) connected")
        #expect(recovered, "serve did not recover")
        kill(process.processIdentifier, SIGTERM)
        let result = await CLI.finish(running)
        stopped = true
        #expect(result.status == 0, "\(result.stderr)")
    }

    // MARK: Timeouts

    static let whole = "GET /mall/index.html HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    /// A valid head sent one byte per piece: far longer than the header timeout at 40 ms a byte.
    static let trickle: [String] = {
        let text = "GET /mall/index.html HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + String(repeating: "a", count: 200) + "\r\n\r\n"
        return text.map { String($0) }
    }()

    @Test("a connection that does not finish its request head is closed by the header timeout", arguments: [
        ("nothing sent", [String]()),
        ("half a head", ["GET /mall/index.html HTTP/1.1\r\nHost: 127.0.0.1\r\n"]),
        ("request line without its end", ["GET /mall/index.html HTTP/1.1"]),
        ("a head trickled a byte at a time", trickle),
        ("a second keep-alive request left half-sent", ["GET /mall/index.html HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", "GET /mall/index.html HTTP/1.1\r\nHost: 127."]),
        ("a second keep-alive request trickled", [whole] + trickle),
    ])
    func headerTimeout(label: String, pieces: [String]) async throws {
        let f = try LocalServerTests.mall()
        // A long idle timeout: only the header timeout can close these.
        let server = try await Self.start(f, header: .seconds(1), idle: .seconds(600))
        let port = server.port
        let (closed, received, sentAll) = try await LocalHTTP.onThread { () -> (Bool, [UInt8], Bool) in
            guard let fd = HostileSocket.connect(port: port, timeout: 60) else { return (false, [], false) }
            defer { close(fd) }
            var sentAll = true
            var received: [UInt8] = []
            // Bounded: at most 40 ms per piece, and a trickle lasts far longer than the timeout.
            for (n, piece) in pieces.enumerated() {
                guard HostileSocket.send(fd, piece) else { sentAll = false; break }
                if n == 0, piece.hasSuffix("\r\n\r\n") {
                    // A whole first request: take its answer before the next one starts.
                    guard let (head, extra) = try? LocalHTTP.readHead(fd) else { break }
                    received += Array("HTTP/1.1 \(head.status)\r\n".utf8) + extra
                    let length = Int(head.header("content-length") ?? "0") ?? 0
                    var chunk = [UInt8](repeating: 0, count: 65536)
                    var got = extra.count
                    while got < length {
                        let n = recv(fd, &chunk, chunk.count, 0)
                        guard n > 0 else { break }
                        got += n
                    }
                } else if pieces.count > 2 {
                    Thread.sleep(forTimeInterval: 0.04)
                }
            }
            let (closed, rest) = HostileSocket.waitForClose(fd, until: .now + .seconds(120))
            return (closed, received + rest, sentAll)
        }
        #expect(closed, "\(label): still open")
        let answers = String(decoding: received, as: UTF8.self).components(separatedBy: "HTTP/1.1 200").count - 1
        // Only a whole first request is answered; the unfinished one never is.
        #expect(answers == (pieces.first?.hasSuffix("\r\n\r\n") == true ? 1 : 0), "\(label): \(answers) answers")
        if pieces.count > 2 { #expect(!sentAll, "\(label): the whole trickle was accepted") }
        #expect(server.metrics.timedOutConnections(.header) == 1, "\(label)")
        #expect(try await Self.servedAgain(port: port))
        await server.stop()
    }

    @Test("an idle keep-alive connection is closed by the idle timeout", arguments: [1, 3])
    func idleKeepAlive(requests: Int) async throws {
        let f = try LocalServerTests.mall()
        let server = try await Self.start(f, header: .seconds(600), idle: .seconds(1))
        let port = server.port
        let (answers, closed) = try await LocalHTTP.onThread { () -> (Int, Bool) in
            guard let fd = HostileSocket.connect(port: port, timeout: 60) else { return (0, false) }
            defer { close(fd) }
            var answers = 0
            for _ in 0..<requests {
                guard HostileSocket.send(fd, "GET /mall/index.html HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
                      let (head, extra) = try? LocalHTTP.readHead(fd), head.status == 200 else { break }
                // Read the body (Content-Length) so the next request starts clean.
                var body = extra
                let length = Int(head.header("content-length") ?? "0") ?? 0
                var chunk = [UInt8](repeating: 0, count: 65536)
                while body.count < length {
                    let n = recv(fd, &chunk, chunk.count, 0)
                    guard n > 0 else { break }
                    body += chunk[0..<n]
                }
                if body == Self.index { answers += 1 }
            }
            return (answers, HostileSocket.waitForClose(fd, until: .now + .seconds(120)).closed)
        }
        #expect(answers == requests)
        #expect(closed, "an idle keep-alive connection stayed open")
        #expect(server.metrics.timedOutConnections(.idle) == 1)
        await server.stop()
    }

    @Test("a client that stops reading a large response is closed by the idle timeout")
    func stalledReader() async throws {
        let f = LocalStoreFixture()
        let size = 32 << 20
        try f.add(version: "1.0.0", files: ["big.bin": localRandomBytes(size, seed: 3)])
        let server = try await Self.start(f, header: .seconds(600), idle: .seconds(1))
        let port = server.port
        let fd = try LocalHTTP.connect(port: port, receiveBuffer: 32 << 10)
        defer { close(fd) }
        try LocalHTTP.send(fd, Array("GET /mall/big.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8))
        let (head, _) = try await LocalHTTP.onThread { try LocalHTTP.readHead(fd) }
        #expect(head.status == 200)
        // Stop reading; the server's writes stall until the idle timeout closes the connection.
        var timedOut = false
        for _ in 0..<3000 where !timedOut {  // 5 minutes: a bound on a hang, not a speed
            try await Task.sleep(for: .milliseconds(100))
            timedOut = server.metrics.timedOutConnections(.idle) == 1
        }
        #expect(timedOut, "a stalled response kept its connection")
        let (closed, rest) = try await LocalHTTP.onThread { HostileSocket.waitForClose(fd, until: .now + .seconds(120)) }
        #expect(closed && rest.count < size, "the whole body arrived: the connection was not cut")
        #expect(try await Self.servedAgain(port: port))
        await server.stop()
    }

    @Test("a request body read for longer than the header timeout is forwarded whole; one that stalls is closed by the idle timeout")
    func slowBody() async throws {
        let upstream = try await ProxyHarness.startOrigin()
        let origin = MirrorOrigin(scheme: "http", host: "127.0.0.1", port: upstream.port)!
        let f = LocalStoreFixture()
        try f.add(version: "1.0.0", fixture: nil, whitelist: ["\(origin.origin)/never-requested/"])
        // Idle 10 s: far above a 300 ms gap even when a loaded machine stretches it.
        let server = try await Self.start(f, header: .seconds(1), idle: .seconds(10))
        let port = server.port, host = "\(origin.mirrorHost):\(port)"
        let pieces = (0..<10).map { String(repeating: Character(UnicodeScalar(UInt8(97 + $0))), count: 4) }
        // 10 pieces 300 ms apart: 2.7 s of body (past the header timeout), each gap inside the idle timeout.
        let answer = try await LocalHTTP.onThread { () -> String in
            guard let fd = HostileSocket.connect(port: port, timeout: 60) else { return "no connection" }
            defer { close(fd) }
            guard HostileSocket.send(fd, "POST /echo/slow HTTP/1.1\r\nHost: \(host)\r\nContent-Length: 40\r\n\r\n") else { return "head not sent" }
            for piece in pieces {
                Thread.sleep(forTimeInterval: 0.3)
                guard HostileSocket.send(fd, piece) else { return "cut after some body" }
            }
            guard let (head, extra) = try? LocalHTTP.readHead(fd) else { return "no answer" }
            var body = extra, chunk = [UInt8](repeating: 0, count: 4096)
            while body.count < Int(head.header("content-length") ?? "0") ?? 0 {
                let n = recv(fd, &chunk, chunk.count, 0)
                guard n > 0 else { break }
                body += chunk[0..<n]
            }
            return "\(head.status)\n" + String(decoding: body, as: UTF8.self)
        }
        #expect(answer.hasPrefix("200\n"), "\(answer)")
        #expect(ProxyHarness.Echo(parsing: answer).bodyLength == 40, "\(answer)")
        #expect(server.metrics.timedOutConnections(.header) == 0)
        // Half a body, then nothing: closed once nothing has been read for the idle timeout.
        let closed = try await LocalHTTP.onThread { () -> Bool in
            guard let fd = HostileSocket.connect(port: port) else { return false }
            defer { close(fd) }
            guard HostileSocket.send(fd, "POST /echo/stall HTTP/1.1\r\nHost: \(host)\r\nContent-Length: 40\r\n\r\n0123456789") else { return false }
            return HostileSocket.waitForClose(fd, until: .now + .seconds(120)).closed
        }
        #expect(closed, "a stalled body kept its connection")
        #expect(server.metrics.timedOutConnections(.idle) == 1)
        #expect(server.metrics.timedOutConnections(.header) == 0)
        await server.stop()
        await upstream.stop()
    }

    // MARK: Host

    @Test("a request with two Host lines gets 400, whatever they say", arguments: [
        ("127.0.0.1", "127.0.0.1"),
        ("localhost", "127.0.0.1"),
        ("127.0.0.1", "evil.example"),
        ("evil.example", "127.0.0.1"),
        ("127.0.0.1", ""),
    ], [false, true])
    func duplicateHost(hosts: (String, String), allowRemote: Bool) async throws {
        let f = try LocalServerTests.mall()
        let server = try await Self.start(f, allowRemote: allowRemote)
        let port = server.port
        for (first, second) in [(hosts.0, hosts.1), (hosts.0.uppercased(), hosts.1)] {
            let response = try await LocalHTTP.request(
                port: port, "/mall/index.html", headers: [("host", second)], host: first)
            #expect(response.status == 400, "Host: \(first) / host: \(second)")
            #expect(!response.text.contains("<html"))
            #expect(response.header("x-offline-version") == nil)
        }
        let open = try await LocalHTTP.request(
            port: port, "/open?url=\("https://h5.example.invalid/mall/index.html".localQueryEncoded)", headers: [("Host", hosts.1)],
            host: hosts.0)
        #expect(open.status == 400 && open.header("location") == nil)
        // One Host line is still fine.
        let single = try await LocalHTTP.request(port: port, "/mall/index.html")
        #expect(single.status == 200 && single.body == Self.index)
        await server.stop()
    }
}
