import Crypto
import Foundation
import Synchronization
import Testing
@testable import OfflineAgent
@testable import OfflineServe
#if canImport(Glibc)
import Glibc
import TestSupport
#endif

@Suite("LocalServer")
struct LocalServerTests {
    typealias F = LocalStoreFixture

    /// Over `LocalServerResponder.keepLimit`: streamed from the descriptor, never kept.
    static let hugeSize = 3 << 20

    /// `mall` 1.0.0 from the fixture app plus a few typed files, a big one (kept in
    /// memory) and, with `huge`, one that is streamed.
    static func mall(huge: Bool = false) throws -> LocalStoreFixture {
        let f = LocalStoreFixture()
        try f.add(version: "1.0.0", files: (huge ? ["huge.bin": localRandomBytes(hugeSize, seed: 9)] : [:]).merging([
            "img/icon.svg": Array("<svg xmlns=\"http://www.w3.org/2000/svg\"/>".utf8),
            "data/config.json": Array("{\"a\":1}".utf8),
            "fonts/ui.woff2": [0x77, 0x4f, 0x46, 0x32, 1, 2, 3],
            "pages/index.html": Array("<p>pages index</p>".utf8),
            "big.bin": localRandomBytes(300_000, seed: 7),
            "empty.txt": [],
        ]) { $1 })
        return f
    }

    @Test("files of the active version come with their content type and version")
    func servesFiles() async throws {
        let f = try Self.mall(huge: true)
        try await withLocalServer(f) { server in
            let cases: [(String, String, [UInt8])] = [
                ("index.html", "text/html; charset=utf-8", F.fixtureBytes("1.0.0", "index.html")),
                ("js/app.js", "text/javascript; charset=utf-8", F.fixtureBytes("1.0.0", "js/app.js")),
                ("css/app.css", "text/css; charset=utf-8", F.fixtureBytes("1.0.0", "css/app.css")),
                ("img/logo.png", "image/png", F.fixtureBytes("1.0.0", "img/logo.png")),
                ("img/icon.svg", "image/svg+xml", Array("<svg xmlns=\"http://www.w3.org/2000/svg\"/>".utf8)),
                ("data/config.json", "application/json", Array("{\"a\":1}".utf8)),
                ("fonts/ui.woff2", "font/woff2", [0x77, 0x4f, 0x46, 0x32, 1, 2, 3]),
                ("big.bin", "application/octet-stream", localRandomBytes(300_000, seed: 7)),
                ("empty.txt", "text/plain; charset=utf-8", []),
                ("huge.bin", "application/octet-stream", localRandomBytes(Self.hugeSize, seed: 9)),
            ]
            for (path, type, bytes) in cases {
                let response = try await LocalHTTP.request(port: server.port, "/mall/\(path)")
                #expect(response.status == 200, "\(path)")
                #expect(response.header("content-type") == type, "\(path)")
                #expect(response.header("content-length") == String(bytes.count), "\(path)")
                #expect(response.header("x-offline-version") == "1.0.0", "\(path)")
                #expect(response.header("accept-ranges") == "bytes")
                #expect(response.header("etag")?.hasPrefix("\"1.0.0-") == true)
                #expect(response.header("last-modified")?.hasSuffix(" GMT") == true)
                #expect(response.body == bytes, "\(path)")
            }
            // Percent-encoded names are decoded once.
            let encoded = try await LocalHTTP.request(port: server.port, "/mall/js/%61pp.js")
            #expect(encoded.status == 200 && encoded.body == F.fixtureBytes("1.0.0", "js/app.js"))
        }
    }

    @Test("directories serve index.html; without the slash they redirect to it")
    func directories() async throws {
        let f = try Self.mall()
        try await withLocalServer(f) { server in
            let root = try await LocalHTTP.request(port: server.port, "/mall/")
            #expect(root.status == 200 && root.body == F.fixtureBytes("1.0.0", "index.html"))
            #expect(root.header("content-type") == "text/html; charset=utf-8")
            let pages = try await LocalHTTP.request(port: server.port, "/mall/pages/")
            #expect(pages.status == 200 && pages.text == "<p>pages index</p>")
            let bare = try await LocalHTTP.request(port: server.port, "/mall?x=1")
            #expect(bare.status == 301 && bare.header("location") == "/mall/?x=1")
            let dir = try await LocalHTTP.request(port: server.port, "/mall/pages")
            #expect(dir.status == 301 && dir.header("location") == "/mall/pages/")
        }
    }

    @Test("missing files, unknown apps and bad names are 404")
    func notFound() async throws {
        let f = try Self.mall()
        try await withLocalServer(f) { server in
            for target in ["/mall/nope.js", "/mall/js/", "/mall/js/app.js/", "/shop/index.html", "/shop", "/Mall/index.html", "/"] {
                let response = try await LocalHTTP.request(port: server.port, target)
                #expect(response.status == 404, "\(target)")
            }
            #expect(server.metrics.fileResponses(app: "mall", code: 404) == 2 + 1)
        }
    }

    @Test("paths that try to leave the version directory are refused", arguments: [
        "/mall/..%2f..%2f..%2f..%2f..%2fetc/passwd",
        "/mall/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        "/mall/../../../../../etc/passwd",
        "/mall/js/../../../../../../etc/passwd",
        "/mall/%2fetc%2fpasswd",
        "/mall//etc/passwd",
        "/mall/index.html%00.js",
        "/mall/js%00/app.js",
        "/mall/..%5c..%5c..%5cetc%5cpasswd",
        "/mall/escape.html",
        "/mall/escape-dir/passwd",
        "/mall/escape-dir/",
        "/mall/%zz",
        "/mall/%",
    ])
    func traversal(target: String) async throws {
        let f = try Self.mall()
        let dir = f.directory("1.0.0")
        // Symlinks planted inside the version directory (the extractor never makes any).
        #expect(symlink("/etc/passwd", "\(dir)/escape.html") == 0)
        #expect(symlink("/etc", "\(dir)/escape-dir") == 0)
        try await withLocalServer(f) { server in
            let response = try await LocalHTTP.request(port: server.port, target)
            #expect(response.status == 404 || response.status == 400, "\(target) → \(response.status)")
            #expect(!response.text.contains("root:"))
        }
    }

    @Test("a Host header that is not a loopback name gets 403")
    func hostCheck() async throws {
        let f = try Self.mall()
        try await withLocalServer(f) { server in
            let port = server.port
            for host in ["evil.example", "evil.example:\(port)", "127.0.0.1.evil.example", "localhost.evil.example:\(port)",
                         "10.0.0.1:\(port)", "[::2]:\(port)", "0.0.0.0", "", "127.0.0.1:x", "[::1",
                         // A .localhost name is a mirror host or nothing (docs/PROTOCOL.md, "Mirrored origins").
                         "app.localhost:\(port)"] {
                let response = try await LocalHTTP.request(port: port, "/mall/index.html", host: host)
                #expect(response.status == 403, "Host: \(host)")
                #expect(!response.text.contains("<html"))
            }
            let missing = try await LocalHTTP.request(port: port, "/mall/index.html", omitHost: true)
            #expect(missing.status == 403 || missing.status == 400)
            for host in ["127.0.0.1:\(port)", "localhost:\(port)", "LOCALHOST", "localhost.",
                         "127.1.2.3", "[::1]:\(port)", "[::1]", "[::ffff:127.0.0.1]:\(port)"] {
                let response = try await LocalHTTP.request(port: port, "/mall/index.html", host: host)
                #expect(response.status == 200, "Host: \(host)")
            }
            let open = try await LocalHTTP.request(
                port: port, "/open?url=\((F.whitelist + "index.html").localQueryEncoded)", host: "evil.example")
            #expect(open.status == 403 && open.header("location") == nil)
            #expect(server.metrics.forbiddenHosts == 13)
        }
        // --allow-remote turns the check off.
        try await withLocalServer(f, allowRemote: true) { server in
            let response = try await LocalHTTP.request(port: server.port, "/mall/index.html", host: "evil.example")
            #expect(response.status == 200)
        }
    }

    @Test("loopback bind addresses only, unless remote access is allowed")
    func bindCheck() throws {
        for host in ["0.0.0.0", "192.168.1.10", "::", "example.com"] {
            #expect(throws: OfflineAgentError.self) { try LocalServer(configuration: .init(root: "/tmp", host: host, deviceID: "d")) }
        }
        for host in ["127.0.0.1", "localhost", "::1", "127.0.0.2"] {
            #expect(throws: Never.self) { try LocalServer(configuration: .init(root: "/tmp", host: host, deviceID: "d")) }
        }
        #expect(throws: Never.self) { try LocalServer(configuration: .init(root: "/tmp", host: "0.0.0.0", deviceID: "d", allowRemote: true)) }
        #expect(throws: OfflineAgentError.self) { try LocalServer(configuration: .init(root: "/tmp", port: 70000, deviceID: "d")) }
    }

    @Test("Host header parsing")
    func hostParsing() {
        #expect(LocalHostAuthority("127.0.0.1").isLoopback)
        #expect(LocalHostAuthority("127.255.0.9:65535").isLoopback)
        #expect(LocalHostAuthority("[::1]:80").isLoopback)
        #expect(!LocalHostAuthority("[::1]:").isLoopback)
        #expect(!LocalHostAuthority("::1").isLoopback)  // IPv6 needs brackets in a Host header
        #expect(!LocalHostAuthority("127.0.0.1:123456").isLoopback)
        #expect(!LocalHostAuthority("127.0.0.1 ").isLoopback)
        #expect(!LocalHostAuthority("0x7f.0.0.1").isLoopback)
        #expect(!LocalHostAuthority("2130706433").isLoopback)
        #expect(!LocalHostAuthority(nil).isLoopback)
    }

    @Test("Range requests get 206 with the right bytes, 416 past the end")
    func ranges() async throws {
        let f = try Self.mall(huge: true)
        let huge = localRandomBytes(Self.hugeSize, seed: 9)
        let js = F.fixtureBytes("1.0.0", "js/app.js")
        let big = localRandomBytes(300_000, seed: 7)
        try await withLocalServer(f) { server in
            let port = server.port
            let first = try await LocalHTTP.request(port: port, "/mall/js/app.js", headers: [("Range", "bytes=0-99")])
            #expect(first.status == 206)
            #expect(first.body == Array(js[0..<100]))
            #expect(first.header("content-range") == "bytes 0-99/\(js.count)")
            #expect(first.header("content-length") == "100")

            let open = try await LocalHTTP.request(port: port, "/mall/js/app.js", headers: [("Range", "bytes=30000-")])
            #expect(open.status == 206 && open.body == Array(js[30000...]))

            let suffix = try await LocalHTTP.request(port: port, "/mall/js/app.js", headers: [("Range", "bytes=-50")])
            #expect(suffix.status == 206 && suffix.body == Array(js[(js.count - 50)...]))
            #expect(suffix.header("content-range") == "bytes \(js.count - 50)-\(js.count - 1)/\(js.count)")

            // A kept file, and across the streaming chunk boundaries of a streamed one.
            let middle = try await LocalHTTP.request(port: port, "/mall/big.bin", headers: [("Range", "bytes=65000-200000")])
            #expect(middle.status == 206 && middle.body == Array(big[65000...200000]))
            let streamed = try await LocalHTTP.request(port: port, "/mall/huge.bin", headers: [("Range", "bytes=65000-2200000")])
            #expect(streamed.status == 206 && streamed.body == Array(huge[65000...2200000]))
            let short = try await LocalHTTP.request(port: port, "/mall/huge.bin", headers: [("Range", "bytes=-1000")])
            #expect(short.status == 206 && short.body == Array(huge[(huge.count - 1000)...]))

            let past = try await LocalHTTP.request(port: port, "/mall/js/app.js", headers: [("Range", "bytes=\(js.count)-")])
            #expect(past.status == 416)
            #expect(past.header("content-range") == "bytes */\(js.count)")

            // If-Range with a stale validator: the whole file.
            let stale = try await LocalHTTP.request(
                port: port, "/mall/js/app.js", headers: [("Range", "bytes=0-9"), ("If-Range", "\"stale\"")])
            #expect(stale.status == 200 && stale.body == js)
            let etag = try #require(first.header("etag"))
            let fresh = try await LocalHTTP.request(
                port: port, "/mall/js/app.js", headers: [("Range", "bytes=0-9"), ("If-Range", etag)])
            #expect(fresh.status == 206 && fresh.body == Array(js[0..<10]))
            #expect(server.metrics.fileResponses(app: "mall", code: 206) == 7)
            #expect(server.metrics.fileResponses(app: "mall", code: 416) == 1)
        }
    }

    @Test("If-None-Match and If-Modified-Since get 304")
    func conditional() async throws {
        let f = try Self.mall()
        try await withLocalServer(f) { server in
            let port = server.port
            let full = try await LocalHTTP.request(port: port, "/mall/css/app.css")
            let etag = try #require(full.header("etag"))
            let lastModified = try #require(full.header("last-modified"))

            let same = try await LocalHTTP.request(port: port, "/mall/css/app.css", headers: [("If-None-Match", etag)])
            #expect(same.status == 304 && same.body.isEmpty)
            #expect(same.header("etag") == etag)
            let weak = try await LocalHTTP.request(port: port, "/mall/css/app.css", headers: [("If-None-Match", "\"x\", W/\(etag)")])
            #expect(weak.status == 304)
            let other = try await LocalHTTP.request(port: port, "/mall/css/app.css", headers: [("If-None-Match", "\"other\"")])
            #expect(other.status == 200 && other.body == full.body)
            // Another file's tag doesn't match.
            let js = try await LocalHTTP.request(port: port, "/mall/js/app.js", headers: [("If-None-Match", etag)])
            #expect(js.status == 200)

            let since = try await LocalHTTP.request(port: port, "/mall/css/app.css", headers: [("If-Modified-Since", lastModified)])
            #expect(since.status == 304 && since.body.isEmpty)
            let old = try await LocalHTTP.request(
                port: port, "/mall/css/app.css", headers: [("If-Modified-Since", "Thu, 01 Jan 2015 00:00:00 GMT")])
            #expect(old.status == 200 && old.body == full.body)
            // If-None-Match wins over If-Modified-Since.
            let both = try await LocalHTTP.request(
                port: port, "/mall/css/app.css", headers: [("If-None-Match", "\"other\""), ("If-Modified-Since", lastModified)])
            #expect(both.status == 200)
            #expect(server.metrics.fileResponses(app: "mall", code: 304) == 3)
        }
    }

    @Test("a new version changes the validators; a rollback brings the old ones back")
    func validatorsAcrossVersions() async throws {
        let f = try Self.mall()
        try await withLocalServer(f) { server in
            let port = server.port
            let before = try await LocalHTTP.request(port: port, "/mall/js/app.js")
            let etag = try #require(before.header("etag"))
            try f.add(version: "1.1.0", fixture: "1.1.0")
            let after = try await LocalHTTP.request(port: port, "/mall/js/app.js", headers: [("If-None-Match", etag)])
            #expect(after.status == 200)
            #expect(after.body == F.fixtureBytes("1.1.0", "js/app.js"))
            #expect(after.header("x-offline-version") == "1.1.0")
            #expect(after.header("etag") != etag)
            // Back to 1.0.0: its files are the same bytes, so its old tag matches again.
            _ = try f.store.rollback("mall")
            let back = try await LocalHTTP.request(port: port, "/mall/js/app.js", headers: [("If-None-Match", etag)])
            #expect(back.status == 304)
            #expect(back.header("x-offline-version") == "1.0.0")
        }
    }

    @Test("a version reinstalled with other bytes is served from its new files, not the kept ones")
    func reinstalledVersion() async throws {
        let f = try Self.mall()
        try await withLocalServer(f) { server in
            let first = try await LocalHTTP.request(port: server.port, "/mall/js/app.js")
            #expect(first.body == F.fixtureBytes("1.0.0", "js/app.js"))
            // Away to 1.1.0, then 1.0.0 again from different bytes (same directory name).
            try f.add(version: "1.1.0", fixture: "1.1.0")
            try FileManager.default.removeItem(atPath: f.directory("1.0.0"))
            try FileManager.default.removeItem(atPath: f.directory("1.0.0") + ".json")
            try f.add(version: "1.0.0", fixture: "1.2.0")
            let again = try await LocalHTTP.request(port: server.port, "/mall/js/app.js")
            #expect(again.header("x-offline-version") == "1.0.0")
            #expect(again.body == F.fixtureBytes("1.2.0", "js/app.js"))
        }
    }

    @Test("HEAD sends the headers of GET without a body")
    func head() async throws {
        let f = try Self.mall(huge: true)
        try await withLocalServer(f) { server in
            for path in ["/mall/js/app.js", "/mall/big.bin", "/mall/huge.bin", "/mall/"] {
                let get = try await LocalHTTP.request(port: server.port, path)
                let head = try await LocalHTTP.request(port: server.port, path, method: "HEAD")
                #expect(head.status == 200)
                #expect(head.body.isEmpty)
                #expect(head.header("content-length") == String(get.body.count))
                #expect(head.header("content-type") == get.header("content-type"))
                #expect(head.header("etag") == get.header("etag"))
            }
            let missing = try await LocalHTTP.request(port: server.port, "/mall/nope", method: "HEAD")
            #expect(missing.status == 404 && missing.body.isEmpty)
            let post = try await LocalHTTP.request(port: server.port, "/mall/index.html", method: "POST")
            #expect(post.status == 405 && post.header("allow") == "GET, HEAD")
        }
    }

    /// `mall` served, `old` below its miniVersion, `gray` at rollout 0.
    static func branches() throws -> LocalStoreFixture {
        let f = try Self.mall()
        try f.add("old", version: "1.0.0", whitelist: ["https://old.example.invalid/old/"])
        var check = f.store.checkState("old")
        check.knownMiniVersion = Version("2.0.0")
        try f.store.saveCheckState(check, for: "old")
        try f.add("gray", version: "1.0.0", whitelist: ["https://gray.example.invalid/gray/"], rollout: 0)
        return f
    }

    @Test("/open redirects to the local copy or to the network, by PROTOCOL.md's rules", arguments: [
        // (URL, the path served offline; nil = not served offline). A URL on a mirrored origin
        // (each app has its own) goes to its mirror either way, which serves or forwards it.
        ("https://h5.example.invalid/mall/index.html", "/mall/index.html"),
        ("https://h5.example.invalid/mall/", "/mall/"),
        ("https://H5.EXAMPLE.INVALID:443/mall/pages/about.html?q=1&lang=zh#top", "/mall/pages/about.html?q=1&lang=zh#top"),
        ("https://h5.example.invalid/mall/js/%61pp.js", "/mall/js/%61pp.js"),
        ("https://other.example/mall/index.html", nil),  // not whitelisted
        ("http://h5.example.invalid/mall/index.html", nil),  // scheme differs
        ("https://h5.example.invalid/mallx/index.html", nil),  // not at a / boundary
        ("https://old.example.invalid/old/index.html", nil),  // below miniVersion
        ("https://gray.example.invalid/gray/index.html", nil),  // outside rollout
        ("https://h5.example.invalid/mall/missing.html", nil),  // missing file
        ("https://h5.example.invalid/mall/..%2f..%2fetc/passwd", nil),  // leaves the package
    ] as [(String, String?)])
    func open(url: String, local: String?) async throws {
        let f = try Self.branches()
        try await withLocalServer(f) { server in
            let response = try await LocalHTTP.request(port: server.port, "/open?url=\(url.localQueryEncoded)")
            #expect(response.status == 302)
            #expect(response.header("cache-control") == "no-store")
            let location = try #require(response.header("location"))
            let target = URL(string: url)!
            guard let origin = MirrorOrigin(url: target), ["h5.example.invalid", "old.example.invalid", "gray.example.invalid"].contains(origin.host),
                  origin.scheme == "https" else {
                #expect(local == nil)
                #expect(location == target.absoluteString)
                return
            }
            let mirrorBase = origin.mirrorBase(servePort: server.port)
            #expect(location == origin.mirrorURL(for: target, servePort: server.port))
            // The mirror serves the redirect target from the package, or hands it to the origin.
            let path = String(location.dropFirst(mirrorBase.count)).components(separatedBy: "#")[0]
            let page = try await LocalHTTP.request(port: server.port, path, host: "\(origin.mirrorHost):\(server.port)")
            if let local {
                #expect(location == mirrorBase + local)
                #expect(page.status == 200 && page.header("x-offline-source") == "package")
            } else {
                #expect(page.header("x-offline-source") == "origin")
            }
        }
    }

    @Test("/open refuses a missing or non-HTTP URL")
    func openBadRequests() async throws {
        let f = try Self.mall()
        try await withLocalServer(f) { server in
            for target in ["/open", "/open?url=", "/open?url=javascript%3Aalert(1)", "/open?url=%2Fmall%2Findex.html", "/open?other=1"] {
                let response = try await LocalHTTP.request(port: server.port, target)
                #expect(response.status == 400, "\(target)")
                #expect(response.header("location") == nil)
            }
        }
    }

    @Test("metrics count offline hits and network fallbacks per app and reason")
    func metrics() async throws {
        let f = try Self.branches()
        try await withLocalServer(f) { server in
            let opens = [
                "https://h5.example.invalid/mall/index.html", "https://h5.example.invalid/mall/pages/about.html",
                "https://h5.example.invalid/mall/", "https://other.example/x", "https://old.example.invalid/old/index.html",
                "https://old.example.invalid/old/index.html", "https://gray.example.invalid/gray/index.html",
                "https://h5.example.invalid/mall/missing.js",
            ]
            for url in opens {
                let response = try await LocalHTTP.request(port: server.port, "/open?url=\(url.localQueryEncoded)")
                #expect(response.status == 302)
            }
            _ = try await LocalHTTP.request(port: server.port, "/mall/index.html")
            _ = try await LocalHTTP.request(port: server.port, "/mall/nope")
            let m = server.metrics
            #expect(m.offlineHits(app: "mall") == 3)
            #expect(m.networkFallbacks(app: nil, reason: .notWhitelisted) == 1)
            #expect(m.networkFallbacks(app: "old", reason: .belowMiniVersion) == 2)
            #expect(m.networkFallbacks(app: "gray", reason: .outsideRollout) == 1)
            #expect(m.networkFallbacks(app: "mall", reason: .missingFile) == 1)
            #expect(m.fileResponses(app: "mall", code: 200) == 1)
            #expect(m.fileResponses(app: "mall", code: 404) == 1)

            let text = try await LocalHTTP.request(port: server.port, "/metrics")
            #expect(text.status == 200)
            #expect(text.header("content-type")?.hasPrefix("text/plain; version=0.0.4") == true)
            let lines = Set(text.text.split(separator: "\n").map(String.init))
            for line in [
                "# TYPE offline_agent_offline_hits_total counter",
                "offline_agent_offline_hits_total{app=\"mall\"} 3",
                "# TYPE offline_agent_network_fallbacks_total counter",
                "offline_agent_network_fallbacks_total{app=\"\",reason=\"not-whitelisted\"} 1",
                "offline_agent_network_fallbacks_total{app=\"old\",reason=\"below-mini-version\"} 2",
                "offline_agent_network_fallbacks_total{app=\"gray\",reason=\"outside-rollout\"} 1",
                "offline_agent_network_fallbacks_total{app=\"mall\",reason=\"missing-file\"} 1",
                "offline_agent_file_responses_total{app=\"mall\",code=\"200\"} 1",
                "offline_agent_file_responses_total{app=\"mall\",code=\"404\"} 1",
                "offline_agent_forbidden_host_total 0",
            ] {
                #expect(lines.contains(line), "missing: \(line)")
            }
            // Every sample line is `name{labels} value` or `name value` (the gauge prints as `1.0`).
            for line in lines where !line.hasPrefix("#") {
                #expect(line.wholeMatch(of: /[a-z_]+(\{[^}]*\})? [0-9]+(\.[0-9]+)?/) != nil, "\(line)")
            }
        }
    }

    @Test("a response keeps its version while a swap collects that version")
    func pinnedDuringCollection() async throws {
        let f = LocalStoreFixture()
        let count = 16 << 20
        let old = localRandomBytes(count, seed: 1), new = localRandomBytes(count, seed: 2)
        try f.add(version: "1.0.0", files: ["big.bin": old])
        try await withLocalServer(f) { server in
            let port = server.port
            // A small receive window: the server can't finish writing before we read.
            let fd = try LocalHTTP.connect(port: port, receiveBuffer: 64 << 10)
            try LocalHTTP.send(fd, Array("GET /mall/big.bin HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".utf8))
            let (head, extra) = try await LocalHTTP.onThread { try LocalHTTP.readHead(fd) }
            #expect(head.status == 200 && head.header("x-offline-version") == "1.0.0")

            // Swap to 2.0.0 and collect everything else, mid-response.
            try f.add(version: "2.0.0", fixture: nil, files: ["big.bin": new])
            f.store.collectGarbage("mall", keep: [Version("2.0.0")!])
            #expect(FileSystem.isDirectory(f.directory("1.0.0")), "a pinned version was collected")
            let next = try await LocalHTTP.request(port: port, "/mall/big.bin", headers: [("Range", "bytes=0-15")])
            #expect(next.header("x-offline-version") == "2.0.0" && next.body == Array(new[0..<16]))

            let body = try await LocalHTTP.onThread { () -> [UInt8] in
                var body = extra
                var chunk = [UInt8](repeating: 0, count: 1 << 16)
                while true {
                    let n = recv(fd, &chunk, chunk.count, 0)
                    if n <= 0 { break }
                    body += chunk[0..<n]
                }
                return body
            }
            close(fd)
            #expect(body.count == count)
            #expect(body == old, "the response mixed versions")

            // Once that response is over, nothing holds 1.0.0 (the server's kept pin moved
            // to 2.0.0 with the request above): the next collection removes it. The server
            // lets go of the response a moment after the client has read it all, hence the
            // retries (bounded by 2 minutes: a pin never let go, not a speed).
            for _ in 0..<12_000 where FileSystem.isDirectory(f.directory("1.0.0")) {
                f.store.collectGarbage("mall", keep: [Version("2.0.0")!])
                try await Task.sleep(for: .milliseconds(10))
            }
            #expect(!FileSystem.isDirectory(f.directory("1.0.0")), "a finished response still pins its version")
            let after = try await LocalHTTP.request(port: port, "/mall/big.bin", headers: [("Range", "bytes=0-15")])
            #expect(after.header("x-offline-version") == "2.0.0" && after.body == Array(new[0..<16]))
        }
    }

    @Test("serving continuously while syncs swap versions: every response is one version's file")
    func servingDuringSync() async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        let versions = ["1.0.0", "1.1.0", "1.2.0"]
        // Files that change between the versions (the logo only at 1.2.0).
        let paths = ["js/app.js", "index.html", "css/app.css", "img/logo.png"]
        var expected: [String: [UInt8]] = [:]
        for version in versions {
            for path in paths { expected["\(version)/\(path)"] = h.expected(version, path) }
        }
        #expect(Set(versions.map { expected["\($0)/js/app.js"]! }).count == 3)
        let server = try await LocalServer(configuration: .init(root: h.root.path, port: 0, deviceID: "device")).start()
        let port = server.port
        let done = LocalFlag()
        let requests = LocalCounter()
        let known = expected
        // Clients loop until the syncs are over (and at most 5,000 requests each).
        let clients = (0..<4).map { client in
            Task { () throws -> [String: Int] in
                var seen: [String: Int] = [:]
                var newest = Version("0")!
                for n in 0..<5_000 {
                    let finished = done.isSet
                    let path = paths[(n + client) % paths.count]
                    let response = try await LocalHTTP.request(port: port, "/mall/\(path)")
                    requests.add()
                    guard response.status == 200 else { throw LocalHTTP.Failure(description: "\(path): status \(response.status)") }
                    let version = response.header("x-offline-version") ?? "?"
                    guard known["\(version)/\(path)"] == response.body else {
                        throw LocalHTTP.Failure(description: "\(path) from \(version) is not that version's file")
                    }
                    // Swaps only go forward: one client never sees an older version again.
                    let current = Version(version)!
                    guard current >= newest else { throw LocalHTTP.Failure(description: "\(path): \(version) after \(newest)") }
                    newest = current
                    seen[version, default: 0] += 1
                    if finished { break }
                }
                return seen
            }
        }
        /// Lets the clients make `count` more requests (bounded: they stop at 5,000 each).
        func settle(_ count: Int) async throws {
            let target = requests.value + count
            for _ in 0..<10_000 where requests.value < target && !clients.isEmpty {
                try await Task.sleep(for: .milliseconds(5))
            }
        }
        try await settle(40)
        for version in ["1.1.0", "1.2.0"] {
            h.origin.setManifest(h.full(version))
            let report = await h.sync()
            #expect(report.result == .updated && report.version?.description == version)
            try await settle(40)
        }
        done.set()
        var seen: [String: Int] = [:]
        for client in clients {
            do {
                seen.merge(try await client.value, uniquingKeysWith: +)
            } catch {
                Issue.record("\(error)")
            }
        }
        // Every version was served, and the last request of each client (started after
        // the last swap) came from 1.2.0.
        for version in versions { #expect((seen[version] ?? 0) > 0, "no response from \(version): \(seen)") }
        #expect((seen["1.2.0"] ?? 0) >= 4)
        let last = try await LocalHTTP.request(port: port, "/mall/js/app.js")
        #expect(last.body == expected["1.2.0/js/app.js"])
        await server.stop()
    }

    @Test("offline-agent serve prints its port, serves, and stops gracefully on SIGTERM and SIGINT")
    func cli() async throws {
        let f = try Self.mall()
        for signal in [SIGTERM, SIGINT] {
            let running = try CLI.start(["serve", "--root", f.root.path, "--port", "0", "--device-id", "d"])
            let line = try await LocalHTTP.onThread { () -> String in
                var data = Data()
                while !data.contains(UInt8(ascii: "\n")) {
                    let chunk = running.out.fileHandleForReading.readSomeRetryingInterrupts()
                    if chunk.isEmpty { break }
                    data += chunk
                }
                return String(decoding: data, as: UTF8.self)
            }
            let match = try #require(line.firstMatch(of: /^listening on http:\/\/127\.0\.0\.1:([0-9]+)\n/), "stdout: \(line)")
            let port = try #require(Int(match.1))
            #expect(port > 0)
            let response = try await LocalHTTP.request(port: port, "/mall/index.html")
            #expect(response.status == 200 && response.body == F.fixtureBytes("1.0.0", "index.html"))
            kill(running.process.processIdentifier, signal)
            let result = await CLI.finish(running)
            #expect(result.status == 0 && !result.signaled, "signal \(signal): \(result.stderr)")
        }
        let refused = try await CLI.run(["serve", "--root", f.root.path, "--host", "0.0.0.0", "--port", "0"])
        #expect(refused.status == 64)
        #expect(refused.stderr.contains("--allow-remote"))
    }
}

/// A count shared by several tasks.
final class LocalCounter: Sendable {
    private let count = Mutex(0)

    var value: Int { count.withLock { $0 } }
    func add() { count.withLock { $0 += 1 } }
}

/// A flag set once, read from several tasks.
final class LocalFlag: Sendable {
    private let value = Mutex(false)

    var isSet: Bool { value.withLock { $0 } }
    func set() { value.withLock { $0 = true } }
}
