import Foundation
import Testing
@testable import OfflineAgent
@testable import OfflineServe
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// `serve` where it meets what it does not control, tried as an attacker would: pages of
/// other sites, local processes speaking raw HTTP, origins that answer oddly. Each test
/// fails against a server that lets the class of request through.
@Suite("Serve edges")
struct ServeEdgeTests {
    typealias H = ProxyHarness

    /// Sends `text` on a new connection; what came back and whether the server closed.
    static func raw(_ port: Int, _ text: String, timeout: Int = 20) async throws -> (text: String, closed: Bool) {
        let (_, received, closed) = try await OriginProxyTests.raw(port: port, bytes: Array(text.utf8), timeout: timeout)
        return (received, closed)
    }

    // MARK: Framing fields are never hop-by-hop

    @Test("a Connection header naming a framing field never unframes a forwarded body (no request smuggled to the origin)",
          arguments: ["GET", "DELETE", "OPTIONS", "POST", "PUT"], ["Content-Length", "content-length, Host", "keep-alive, Content-Length"])
    func framingFieldsStay(method: String, listed: String) async throws {
        let upstream = try ScriptedServer { .ok(Array("answer to \($0.path)".utf8)) }
        defer { upstream.stop() }
        let origin = MirrorOrigin(scheme: "http", host: "127.0.0.1", port: upstream.port)!
        try await H.withFront(origins: [origin]) { front in
            let host = front.authority(origin)
            let smuggled = "GET /smuggled HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n"
            let text = "\(method) /api/first HTTP/1.1\r\nHost: \(host)\r\nConnection: \(listed)\r\nContent-Length: \(smuggled.utf8.count)\r\n\r\n"
                + smuggled + "GET /api/second HTTP/1.1\r\nHost: \(host)\r\nConnection: close\r\n\r\n"
            let answer = try await Self.raw(front.port, text)
            #expect(answer.text.contains("answer to /api/first") && answer.text.contains("answer to /api/second"), "\(answer.text)")
            #expect(!answer.text.contains("/smuggled"))
        }
        // The origin saw exactly the page's two requests, the first with its body framed.
        #expect(upstream.requests.map(\.path) == ["/api/first", "/api/second"])
        #expect(upstream.requests.first?.header("content-length") == String("GET /smuggled HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n".utf8.count))
    }

    @Test("POSTs one after another on one kept-alive connection are each forwarded and answered, on one origin connection")
    func postsOnOneConnection() async throws {
        let upstream = try ScriptedServer { request in .ok(Array("posted \(request.path)".utf8)) }
        defer { upstream.stop() }
        let origin = MirrorOrigin(scheme: "http", host: "127.0.0.1", port: upstream.port)!
        try await Self.postSix(through: origin)
        #expect(upstream.requests.map(\.path) == (0..<6).map { "/api/\($0)" })
        #expect(upstream.connections == 1)
    }

    @Test("POSTs one after another on one kept-alive connection to a real nginx that answers from their heads",
          .enabled(if: Nginx.missing == nil, "nginx is not installed"))
    func postsAnsweredBeforeTheirBodies() async throws {
        // `return 200` answers as soon as the head is read, often before the page's end of
        // body has reached the exchange: the answer must still find the request complete.
        let nginx = try await Nginx(server: "location / { return 200 'posted $uri'; }")
        defer { nginx.stop() }
        try await Self.postSix(through: MirrorOrigin(scheme: "http", host: "127.0.0.1", port: nginx.port)!, count: 40)
    }

    /// `count` POSTs with small bodies, one after another on one connection, each answered `posted <path>`.
    static func postSix(through origin: MirrorOrigin, count: Int = 6) async throws {
        try await H.withFront(origins: [origin]) { front in
            let host = front.authority(origin)
            let answers = try await LocalHTTP.onThread { () -> [String] in
                let fd = try LocalHTTP.connect(port: front.port)
                defer { close(fd) }
                return try (0..<count).map { n in
                    let body = "{\"n\":\(n)}"
                    try LocalHTTP.send(fd, Array("POST /api/\(n) HTTP/1.1\r\nHost: \(host)\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)".utf8))
                    let (head, extra) = try LocalHTTP.readHead(fd)
                    var bytes = extra, chunk = [UInt8](repeating: 0, count: 4096)
                    while bytes.count < Int(head.header("content-length") ?? "0") ?? 0 {
                        let got = recv(fd, &chunk, chunk.count, 0)
                        guard got > 0 else { break }
                        bytes += chunk[0..<got]
                    }
                    return "\(head.status) " + String(decoding: bytes, as: UTF8.self)
                }
            }
            #expect(answers == (0..<count).map { "200 posted /api/\($0)" })
        }
    }

    // MARK: Targets byte for byte

    @Test("path and query reach the origin byte for byte, from a missing file's forward and any other", arguments: [
        "/mall/missing%ff?q=1", "/mall/a%25b%zz?x=%zz&y=%", "/api/a%5Cb?c=%2F%2f", "/api/%2e%2e/%2E/x;p=1?", "/mall/sub/?a=1&a=2#",
        "/api/x?q=a+b%20c", "/mall//double//slash",
    ])
    func targetByteForByte(target: String) async throws {
        let upstream = try ScriptedServer { _ in .ok(Array("origin".utf8)) }
        defer { upstream.stop() }
        let origin = MirrorOrigin(scheme: "http", host: "127.0.0.1", port: upstream.port)!
        // `/mall/` is the package's: what it lacks goes to the origin as a missing file.
        let f = LocalStoreFixture()
        try f.add(version: "1.0.0", fixture: nil, files: ["index.html": Array("<p>mall</p>".utf8)], whitelist: ["\(origin.origin)/mall/"])
        try await withLocalServer(f) { server in
            // No fragment is ever sent: a browser keeps it.
            let sent = target.hasSuffix("#") ? String(target.dropLast()) : target
            let answer = try await Self.raw(
                server.port, "GET \(sent) HTTP/1.1\r\nHost: \(origin.mirrorHost):\(server.port)\r\nConnection: close\r\n\r\n")
            #expect(answer.text.hasPrefix("HTTP/1.1 200") && answer.text.hasSuffix("origin"), "\(answer.text)")
            #expect(upstream.requests.map(\.target) == [sent])
        }
    }

    // MARK: CONNECT

    @Test("CONNECT is refused (405) on a mirror host and the plain host, never forwarded, and the connection closes")
    func connectRefused() async throws {
        let upstream = try ScriptedServer { _ in .ok(Array("origin".utf8)) }
        defer { upstream.stop() }
        let origin = MirrorOrigin(scheme: "http", host: "127.0.0.1", port: upstream.port)!
        try await H.withFront(origins: [origin]) { front in
            for (target, host) in [(origin.authority, front.authority(origin)), ("127.0.0.1:\(upstream.port)", "127.0.0.1:\(front.port)")] {
                let answer = try await Self.raw(
                    front.port, "CONNECT \(target) HTTP/1.1\r\nHost: \(host)\r\n\r\nGET / HTTP/1.1\r\nHost: \(host)\r\n\r\n")
                #expect(answer.text.hasPrefix("HTTP/1.1 405"), "\(answer.text)")
                #expect(answer.closed && answer.text.components(separatedBy: "HTTP/1.1 ").count == 2, "\(answer.text)")
            }
        }
        #expect(upstream.requests.isEmpty && upstream.connections == 0)
    }

    // MARK: 101 without an upgrade

    @Test("an origin answering 101 to a plain request: 502, and its connection is never used again")
    func switchingWithoutUpgrade() async throws {
        let upstream = try ScriptedServer { request in
            request.path == "/switch" ? .init(status: 101, headers: [("Upgrade", "h2c"), ("Connection", "Upgrade")]) : .ok(Array("fine".utf8))
        }
        defer { upstream.stop() }
        let origin = MirrorOrigin(scheme: "http", host: "127.0.0.1", port: upstream.port)!
        try await H.withFront(origins: [origin]) { front in
            let host = front.authority(origin)
            // One page connection, so a kept origin connection would be taken again; the
            // harness's read timeout (120 s) is far beyond this client's 20 s.
            let answer = try await Self.raw(
                front.port, "GET /switch HTTP/1.1\r\nHost: \(host)\r\n\r\nGET /after HTTP/1.1\r\nHost: \(host)\r\nConnection: close\r\n\r\n")
            #expect(answer.text.hasPrefix("HTTP/1.1 502"), "\(answer.text)")
            #expect(answer.text.contains("switched protocols"))
            #expect(answer.text.hasSuffix("fine"), "\(answer.text)")
        }
        #expect(upstream.requests.map(\.path) == ["/switch", "/after"])
        #expect(upstream.connections == 2)
    }

    // MARK: What the decoder refuses is answered, and the connection closes

    static let malformed: [(String, String, Int)] = [
        ("two Content-Length", "GET /mall/index.html HTTP/1.1\r\nHost: H\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 400),
        ("Content-Length and Transfer-Encoding", "POST /mall/ HTTP/1.1\r\nHost: H\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
        ("obs-fold", "GET /mall/index.html HTTP/1.1\r\nHost: H\r\nX-A: 1\r\n folded\r\n\r\n", 400),
        ("a bare LF", "GET /mall/index.html HTTP/1.1\nHost: H\n\n", 400),
        ("a NUL in a field", "GET /mall/index.html HTTP/1.1\r\nHost: H\r\nX-A: a\u{0}b\r\n\r\n", 400),
        ("a lowercase method", "get /mall/index.html HTTP/1.1\r\nHost: H\r\n\r\n", 400),
        ("a space before the colon", "GET /mall/index.html HTTP/1.1\r\nHost : H\r\n\r\n", 400),
        ("a head over 80 KiB", "GET /mall/index.html HTTP/1.1\r\nHost: H\r\nX-Big: \(String(repeating: "a", count: 90_000))\r\n\r\n", 431),
        ("over 1000 fields", "GET /mall/index.html HTTP/1.1\r\nHost: H\r\n" + (0..<1100).map { "X-\($0): v\r\n" }.joined() + "\r\n", 431),
        ("a bad request after a good one", "GET /mall/index.html HTTP/1.1\r\nHost: H\r\n\r\nGET / HTTP/1.1\r\nHost: H\r\nContent-Length: x\r\n\r\n", 400),
    ]

    @Test("a request the HTTP decoder refuses gets 400 (431 for a head too large) and the connection closes at once",
          arguments: malformed)
    func refusedRequest(label: String, text: String, status: Int) async throws {
        let f = try LocalServerTests.mall()
        try await withLocalServer(f) { server in
            let answer = try await Self.raw(server.port, text.replacingOccurrences(of: "Host: H", with: "Host: 127.0.0.1:\(server.port)"))
            #expect(answer.closed, "\(label): not closed")
            let last = answer.text.components(separatedBy: "HTTP/1.1 ").last ?? ""
            #expect(last.hasPrefix("\(status) "), "\(label): \(answer.text.prefix(300))")
            #expect(last.lowercased().contains("connection: close"), "\(label)")
            if label.hasPrefix("a bad request after") { #expect(answer.text.hasPrefix("HTTP/1.1 200"), "\(answer.text.prefix(200))") }
        }
    }

    @Test("HTTP/1.0 without keep-alive is answered in HTTP/1.0 and closed; a refused request closes its connection")
    func closesAfterAnswer() async throws {
        let f = try LocalServerTests.mall()
        try await withLocalServer(f) { server in
            let old = try await Self.raw(server.port, "GET /mall/index.html HTTP/1.0\r\nHost: 127.0.0.1:\(server.port)\r\n\r\n")
            #expect(old.closed && old.text.hasPrefix("HTTP/1.0 200"), "\(old.text.prefix(200))")
            #expect(old.text.hasSuffix(String(decoding: LocalStoreFixture.fixtureBytes("1.0.0", "index.html"), as: UTF8.self)))
            // `Connection: close` in any case, among other tokens.
            let closing = try await Self.raw(server.port, "GET /mall/index.html HTTP/1.1\r\nHost: 127.0.0.1:\(server.port)\r\nConnection: foo, CLOSE\r\n\r\n")
            #expect(closing.closed && closing.text.hasPrefix("HTTP/1.1 200"))
            // A 403 for a foreign Host: answered, then nothing more on that connection.
            let foreign = try await Self.raw(
                server.port, "GET /mall/index.html HTTP/1.1\r\nHost: evil.example\r\n\r\nGET /mall/index.html HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            #expect(foreign.closed && foreign.text.hasPrefix("HTTP/1.1 403"), "\(foreign.text.prefix(200))")
            #expect(foreign.text.components(separatedBy: "HTTP/1.1 ").count == 2)
        }
    }

    // MARK: The connection cap

    /// Opens `count` connections that each wait for an answer that has begun and never
    /// ends (an origin that sends its head, then nothing): they stay busy.
    static func busyConnections(_ count: Int, port: Int, mirror: String) async throws -> [Int32] {
        try await LocalHTTP.onThread {
            try (0..<count).map { _ in
                let fd = try LocalHTTP.connect(port: port)
                try LocalHTTP.send(fd, Array("GET /slow HTTP/1.1\r\nHost: \(mirror)\r\n\r\n".utf8))
                _ = try LocalHTTP.readHead(fd)
                return fd
            }
        }
    }

    /// Waits (bounded by 2 minutes: a hang, not a speed) until `server` has `count` connections open.
    static func open(_ count: Int, on server: RunningLocalServer) async throws -> Bool {
        for _ in 0..<12_000 where server.metrics.openConnections != count { try await Task.sleep(for: .milliseconds(10)) }
        return server.metrics.openConnections == count
    }

    @Test("at the connection cap the connection idle longest makes room; busy ones are kept; with none idle, 503")
    func capEvictsIdle() async throws {
        // Apart from the floods, which leave no descriptor for a server to accept with.
        try await DescriptorFlood.during { try await Self.capEvictsIdleAlone() }
    }

    private static func capEvictsIdleAlone() async throws {
        _ = HostileSocket.raiseDescriptorLimit(to: 8192)
        // Busy for longer than the test can take on a loaded machine.
        let upstream = try ScriptedServer { _ in .init(status: 200, body: Array("never all of it".utf8), ending: .stall(seconds: 3600)) }
        defer { upstream.stop() }
        let origin = MirrorOrigin(scheme: "http", host: "127.0.0.1", port: upstream.port)!
        let f = try LocalServerTests.mall()
        try f.add("proxied", version: "1.0.0", fixture: nil, whitelist: ["\(origin.origin)/never/"])
        // Timeouts longer than the test can take on a loaded machine (the forwards' read
        // timeout too: it would end a busy connection): only the cap closes connections here.
        let server = try await ServeHostileClientTests.start(
            f, maxConnections: 8, header: .seconds(3600), idle: .seconds(3600),
            origins: OriginProxy.Configuration(connectTimeout: .seconds(60), readTimeout: .seconds(3600)))
        let port = server.port, mirror = "\(origin.mirrorHost):\(port)"
        let busy = try await Self.busyConnections(4, port: port, mirror: mirror)
        // Four idle ones, oldest first: a local process holding sockets without a request.
        // Each accepted before the next connects: the server's order is the sockets' order.
        var idle: [Int32] = []
        for n in 5...8 {
            idle.append(try #require(HostileSocket.connect(port: port)))
            #expect(try await Self.open(n, on: server))
        }
        #expect(try await Self.open(8, on: server))
        // The web view's request is served; the oldest idle socket is the one closed for it.
        #expect(try await LocalHTTP.request(port: port, "/mall/index.html").status == 200)
        let oldest = idle[0]
        #expect(try await LocalHTTP.onThread { HostileSocket.waitForClose(oldest, until: .now + .seconds(120)).closed }, "the oldest idle connection was kept")
        #expect(server.metrics.evictedConnections == 1 && server.metrics.refusedConnections == 0)
        // Four more busy ones: one takes the free slot, each other one the oldest idle one's.
        let more = try await Self.busyConnections(4, port: port, mirror: mirror)
        for fd in idle {
            #expect(try await LocalHTTP.onThread { HostileSocket.waitForClose(fd, until: .now + .seconds(120)).closed }, "an idle connection was kept")
        }
        #expect(server.metrics.evictedConnections == 4)
        // Four closed for four admitted, all of them idle ones: no busy connection was.
        #expect(try await Self.open(8, on: server))
        // Every connection busy: a new one is refused with a 503 and closed at once.
        let refused = try await LocalHTTP.onThread { () -> String in
            guard let fd = HostileSocket.connect(port: port) else { return "" }
            defer { close(fd) }
            return String(decoding: HostileSocket.waitForClose(fd, until: .now + .seconds(120)).received, as: UTF8.self)
        }
        #expect(refused.hasPrefix("HTTP/1.1 503"), "\(refused)")
        #expect(server.metrics.refusedConnections == 1)
        for fd in busy + more + idle { close(fd) }
        // The origin ends its stalls, so the forwards end and the server stops without waiting for them.
        upstream.stop()
        await server.stop()
    }

    // MARK: A rollback in progress

    @Test("between a rollback's mark and its switch of current, every request is answered from the version it goes back to")
    func rollbackWindow() async throws {
        let f = LocalStoreFixture()
        try f.add(version: "1.0.0")
        _ = try Lifecycle(store: f.store).markGood("mall")
        try f.add(version: "2.0.0", fixture: "1.1.0")
        let old = LocalStoreFixture.fixtureBytes("1.0.0", "index.html")
        try #require(old != LocalStoreFixture.fixtureBytes("1.1.0", "index.html"))
        try await withLocalServer(f) { server in
            let port = server.port, mirror = "h5.example.invalid.localhost:\(port)"
            #expect(try await LocalHTTP.request(port: port, "/mall/index.html").header("x-offline-version") == "2.0.0")
            // Another run holds the root's lock: the rollback is recorded, its switch waits. That is the window.
            var held: RootLock? = try RootLock(root: f.store.root)
            let transition = try Lifecycle(store: f.store).markBad("mall", reason: "rolled back by the operator")
            #expect(!transition.switched && transition.to?.description == "1.0.0")
            #expect(f.store.active("mall")?.version.description == "2.0.0", "current was switched: no window to test")
            for (path, host) in [("/mall/index.html", "127.0.0.1:\(port)"), ("/mall/", "127.0.0.1:\(port)"), ("/mall/index.html", mirror)] {
                let answer = try await LocalHTTP.request(port: port, path, host: host)
                #expect(answer.status == 200 && answer.header("x-offline-fallback") == nil, "\(host)\(path): \(answer.status) \(answer.headers)")
                #expect(answer.header("x-offline-version") == "1.0.0" && answer.body == old, "\(host)\(path)")
            }
            held = nil
            // The switch completes (the next launch or sync does it); the answers stay the same.
            #expect(try Lifecycle(store: f.store).repair("mall"))
            #expect(try await LocalHTTP.request(port: port, "/mall/index.html").body == old)
            withExtendedLifetime(held) {}
        }
    }

    // MARK: Lifecycle state: only the host's navigations, only allowed pages

    /// `mall` 1.0.0 confirmed, 2.0.0 active on the trial its publisher asked for (2
    /// launches), and `shop` on the mirror of another origin.
    static func trialStore() throws -> LocalStoreFixture {
        let f = LocalStoreFixture()
        try f.add(version: "1.0.0")
        _ = try Lifecycle(store: f.store).markGood("mall")
        try f.add(version: "2.0.0", fixture: "1.0.0")
        var record = try #require(f.store.active("mall"))
        record.trialLaunches = 2
        try f.store.updateRecord(record, app: "mall")
        try f.add("shop", version: "1.0.0", fixture: nil, files: ["index.html": Array("<p>shop</p>".utf8)], whitelist: ["https://shop.example.invalid/"])
        return f
    }

    static var openTarget: String { "/open?url=" + (LocalStoreFixture.whitelist + "index.html").localQueryEncoded }

    @Test("requests another site makes never count a launch; the host's navigation does")
    func crossSiteLaunches() async throws {
        let f = try Self.trialStore()
        try #require(Lifecycle(store: f.store).status("mall").state == .trial)
        let server = try await LocalServer(configuration: .init(root: f.root.path, port: 0, deviceID: "d", maxTrialLaunches: 2)).start()
        let port = server.port
        let foreign: [[(String, String)]] = [
            [("Sec-Fetch-Site", "cross-site"), ("Sec-Fetch-Mode", "no-cors"), ("Sec-Fetch-Dest", "image")],
            [("Sec-Fetch-Site", "cross-site"), ("Sec-Fetch-Mode", "navigate"), ("Sec-Fetch-Dest", "document")],
            [("Sec-Fetch-Site", "same-site"), ("Sec-Fetch-Mode", "navigate"), ("Sec-Fetch-Dest", "document")],
            [("Sec-Fetch-Site", "same-origin"), ("Sec-Fetch-Mode", "cors"), ("Sec-Fetch-Dest", "empty")],
            [("Sec-Fetch-Site", "none"), ("Sec-Fetch-Mode", "navigate"), ("Sec-Fetch-Dest", "image")],
            [("Referer", "https://evil.example/page")],
            [("Origin", "https://evil.example")],
            [("Referer", "http://h5.example.invalid.localhost:\(port)/mall/")],
        ]
        for _ in 0..<3 {
            for headers in foreign {
                let open = try await LocalHTTP.request(port: port, Self.openTarget, headers: headers)
                #expect(open.status == 302)
                let restore = try await LocalHTTP.request(
                    port: port, "/session/restore?history=" + "{\"history\":[\"\(LocalStoreFixture.whitelist)index.html\"],\"currentPage\":0}".localQueryEncoded,
                    headers: headers)
                #expect(restore.status == 200)
            }
        }
        let status = Lifecycle(store: f.store).status("mall")
        #expect(status.state == .trial && status.launches == 0 && status.version?.description == "2.0.0", "\(status)")
        #expect(f.store.active("mall")?.version.description == "2.0.0" && !Lifecycle(store: f.store).isBad("mall", Version("2.0.0")!))
        // The host loading the URL (no site), and the web view's own page (same origin), count.
        _ = try await LocalHTTP.request(port: port, Self.openTarget, headers: [("Sec-Fetch-Site", "none"), ("Sec-Fetch-Mode", "navigate"), ("Sec-Fetch-Dest", "document")])
        _ = try await LocalHTTP.request(port: port, Self.openTarget, headers: [("Referer", "http://127.0.0.1:\(port)/shop/index.html")])
        #expect(Lifecycle(store: f.store).status("mall").launches == 2)
        await server.stop()
    }

    @Test(
        "in Chromium, another site's page (images of /open and /session/restore, POSTs to mark-bad) changes no lifecycle state; the host's own navigation counts one launch",
        .enabled(if: BrowserTests.chromium != nil, "chromium is not installed (apt-get install -y chromium)"))
    func crossSiteInChromium() async throws {
        let f = try Self.trialStore()
        let server = try await LocalServer(configuration: .init(root: f.root.path, port: 0, deviceID: "d", maxTrialLaunches: 2)).start()
        let port = server.port
        let history = "{\"history\":[\"\(LocalStoreFixture.whitelist)index.html\"],\"currentPage\":0}".localQueryEncoded
        let images = (0..<4).map { "<img src=\"http://127.0.0.1:\(port)\(Self.openTarget)&n=\($0)\">" }.joined()
            + "<img src=\"http://localhost:\(port)/session/restore?history=\(history)\">"
        let page = """
            <!DOCTYPE html><html><body>\(images)
            <script>
            for (const host of ["127.0.0.1:\(port)", "h5.example.invalid.localhost:\(port)"]) {
              fetch("http://" + host + "/.offline-agent/mark-bad?app=mall&version=2.0.0", {method: "POST", mode: "no-cors"}).catch(() => {});
            }
            </script><p id="attacker">attacker</p></body></html>
            """
        let attacker = try ScriptedServer { _ in .ok(Array(page.utf8), headers: [("Content-Type", "text/html; charset=utf-8")]) }
        defer { attacker.stop() }
        let dom = try await BrowserTests.dumpDOM(attacker.baseURL + "/")
        #expect(dom.contains("attacker"), "\(dom.prefix(300))")
        // The images did reach the server (each /open of a served URL counts a hit), and changed nothing.
        #expect(server.metrics.offlineHits(app: "mall") >= 4)
        var status = Lifecycle(store: f.store).status("mall")
        #expect(status.state == .trial && status.launches == 0 && status.badVersions.isEmpty, "\(status)")
        // The host loading /open itself is a launch.
        _ = try await BrowserTests.dumpDOM("http://127.0.0.1:\(port)\(Self.openTarget)")
        status = Lifecycle(store: f.store).status("mall")
        #expect(status.launches == 1 && status.state == .trial, "\(status)")
        await server.stop()
    }

    @Test("mark-good and mark-bad only from a page of the app's mirror origin; anything else 403 (404 on the plain host) and nothing changes",
          arguments: ["mark-good", "mark-bad"])
    func markOnlyFromItsPages(action: String) async throws {
        let f = try Self.trialStore()
        let server = try await f.start()
        let port = server.port
        let mall = "h5.example.invalid.localhost:\(port)", shop = "shop.example.invalid.localhost:\(port)", plain = "127.0.0.1:\(port)"
        let refused: [(host: String, headers: [(String, String)])] = [
            // Another app's mirror origin.
            (shop, [("Origin", "http://\(shop)")]),
            (shop, [("Referer", "http://\(shop)/index.html")]),
            // The plain host offers no control at all: one origin for every app, so not even
            // a Referer under /mall/ (history.replaceState sets any path) speaks for mall.
            (plain, [("Origin", "http://\(plain)"), ("Referer", "http://\(plain)/mall/index.html")]),
            (plain, [("Origin", "http://\(plain)"), ("Referer", "http://\(plain)/shop/index.html")]),
            (plain, [("Referer", "http://\(plain)/mall")]),
            (plain, [("Origin", "http://\(plain)")]),
            (plain, []),
            // Its own mirror, but sent by another site, or by no page.
            (mall, [("Origin", "https://evil.example")]),
            (mall, [("Origin", "http://\(mall)"), ("Referer", "https://evil.example/")]),
            (mall, []),
            (mall, [("Origin", "null")]),
        ]
        for (host, headers) in refused {
            let answer = try await LocalHTTP.request(
                port: port, "/.offline-agent/\(action)?app=mall&version=2.0.0", method: "POST", headers: headers, host: host)
            #expect(answer.status == (host == plain ? 404 : 403), "\(host) \(headers): \(answer.status) \(answer.text)")
        }
        // A GET never changes anything, from anywhere.
        let get = try await LocalHTTP.request(port: port, "/.offline-agent/\(action)?app=mall&version=2.0.0", headers: [("Origin", "http://\(mall)")], host: mall)
        #expect(get.status == 405)
        var status = Lifecycle(store: f.store).status("mall")
        #expect(status.state == .trial && status.badVersions.isEmpty, "\(status)")
        // Its own pages: the mirror of its origin.
        let answer = try await LocalHTTP.request(
            port: port, "/.offline-agent/\(action)?app=mall&version=2.0.0", method: "POST",
            headers: [("Origin", "http://\(mall)"), ("Referer", "http://\(mall)/mall/index.html")], host: mall)
        #expect(answer.status == 200, "\(answer.text)")
        status = Lifecycle(store: f.store).status("mall")
        if action == "mark-good" { #expect(status.state == .good) } else { #expect(status.badVersions.map(\.version.description) == ["2.0.0"]) }
        await server.stop()
    }
}
