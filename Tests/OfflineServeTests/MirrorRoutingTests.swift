import Foundation
import Testing
@testable import OfflineAgent
@testable import OfflineServe
#if canImport(Glibc)
import Glibc
import TestSupport
#endif

/// `serve` as the front of each whitelisted origin (`docs/PROTOCOL.md`, "Mirrored
/// origins"): which `Host` goes where, the origin's own paths served from the package,
/// and what is handed to the origin instead. Forwarded requests are recognised by
/// `X-Offline-Source: origin` (how they are forwarded is `OriginProxy`'s business);
/// the origins here are loopback ports nothing listens on, so forwarding fails fast.
@Suite("Mirror routing")
struct MirrorRoutingTests {
    typealias F = LocalStoreFixture

    /// An origin nothing listens on (port 1): whatever is forwarded there fails at once.
    static let origin = "http://127.0.0.1:1"
    static let mirror = "127.0.0.1.http-1.localhost"

    /// `spa` on the whole of `origin` (its package root is the origin's `/`) plus `mall`
    /// on the fixture's `https://h5.example.invalid/mall/`.
    static func store(fallback: String? = "index.html", miniVersion: String = "1.0.0", rollout: Int = 100) throws -> LocalStoreFixture {
        let f = LocalStoreFixture()
        try f.add(
            "spa", version: "1.0.0", fixture: nil,
            files: [
                "index.html": Array("<!doctype html><script src=\"/assets/index.js\"></script>".utf8),
                "assets/index.js": Array("console.log('spa')".utf8),
                "assets/app.css": Array("body{}".utf8),
                "docs/index.html": Array("<p>docs</p>".utf8),
            ],
            whitelist: ["\(origin)/"],
            miniVersion: miniVersion, rollout: rollout, fallback: fallback)
        try f.add(version: "1.0.0")
        return f
    }

    static func get(
        _ server: RunningLocalServer, _ target: String, host: String? = nil, method: String = "GET", headers: [(String, String)] = []
    ) async throws -> LocalHTTP.Response {
        try await LocalHTTP.request(port: server.port, target, method: method, headers: headers, host: host ?? "\(mirror):\(server.port)")
    }

    // MARK: Mirrored origins

    @Test("a stable store's apps directory is listed once across requests, and again when an app comes")
    func appsListedOnce() throws {
        let f = try Self.store()
        // Older than the second in which a listing may miss an app (LocalMirrors.currentKey).
        let old = timespec(tv_sec: time(nil) - 10, tv_nsec: 0)
        var times = [old, old]
        try #require(utimensat(AT_FDCWD, f.root.path + "/apps", &times, 0) == 0)
        let mirrors = LocalMirrors(store: f.store)
        let spa = try #require(MirrorOrigin(url: URL(string: Self.origin)!))
        for _ in 0..<5 { #expect(mirrors.snapshot().origins.contains(spa)) }
        #expect(mirrors.listings.load(ordering: .relaxed) == 1)
        try f.add("shop", version: "1.0.0", fixture: nil, files: ["index.html": Array("<p>shop</p>".utf8)],
                  whitelist: ["http://127.0.0.1:2/"])
        let shop = try #require(MirrorOrigin(url: URL(string: "http://127.0.0.1:2")!))
        #expect(mirrors.snapshot().origins.isSuperset(of: [spa, shop]))
        #expect(mirrors.listings.load(ordering: .relaxed) >= 2)
    }

    // MARK: Host routing

    struct HostCase: CustomTestStringConvertible, Sendable {
        var label: String
        /// `PORT` is replaced by the server's port.
        var host: String
        var target: String
        var status: Int
        /// `package`, `origin`, or nil for a response of the plain host or a refusal.
        var source: String?
        var forbidden: Bool = false
        var testDescription: String { label }
    }

    static let hostCases: [HostCase] = [
        .init(label: "mirror of a whitelisted origin: a file of the package", host: "\(mirror):PORT", target: "/assets/index.js", status: 200, source: "package"),
        .init(label: "mirror host spelled in capitals, with a trailing dot", host: "127.0.0.1.HTTP-1.LOCALHOST.:PORT", target: "/assets/index.js", status: 200, source: "package"),
        .init(label: "mirror of the fixture's https origin", host: "h5.example.invalid.localhost:PORT", target: "/mall/index.html", status: 200, source: "package"),
        .init(label: "mirror of an origin no whitelist names", host: "other.example.localhost:PORT", target: "/", status: 403, source: nil, forbidden: true),
        .init(label: "the same host, another scheme", host: "h5.example.invalid.http-80.localhost:PORT", target: "/mall/index.html", status: 403, source: nil, forbidden: true),
        .init(label: "the same host, another port", host: "127.0.0.1.http-2.localhost:PORT", target: "/assets/index.js", status: 403, source: nil, forbidden: true),
        .init(label: "a .localhost name that is no mirror host", host: "foo.localhost:PORT", target: "/mall/index.html", status: 403, source: nil, forbidden: true),
        .init(label: "non-canonical spelling of https:443", host: "h5.example.invalid.https-443.localhost:PORT", target: "/mall/index.html", status: 403, source: nil, forbidden: true),
        .init(label: "plain 127.0.0.1: the app route", host: "127.0.0.1:PORT", target: "/mall/index.html", status: 200, source: nil),
        .init(label: "plain localhost: the app route", host: "localhost:PORT", target: "/spa/assets/index.js", status: 200, source: nil),
        .init(label: "plain localhost: /metrics", host: "localhost:PORT", target: "/metrics", status: 200, source: nil),
        .init(label: "plain 127.0.0.1: /open", host: "127.0.0.1:PORT", target: "/open?url=https%3A%2F%2Fnot.whitelisted%2F", status: 302, source: nil),
        .init(label: "a non-loopback name", host: "h5.example.invalid:PORT", target: "/mall/index.html", status: 403, source: nil, forbidden: true),
        .init(label: "a name ending in localhost without the dot", host: "evillocalhost:PORT", target: "/mall/index.html", status: 403, source: nil, forbidden: true),
    ]

    @Test("each Host goes to its route", arguments: hostCases)
    func hostRouting(_ c: HostCase) async throws {
        let f = try Self.store()
        try await withLocalServer(f) { server in
            let before = server.metrics.forbiddenHosts
            let response = try await Self.get(server, c.target, host: c.host.replacingOccurrences(of: "PORT", with: String(server.port)))
            #expect(response.status == c.status)
            #expect(response.header("x-offline-source") == c.source)
            #expect(server.metrics.forbiddenHosts == before + (c.forbidden ? 1 : 0))
        }
    }

    @Test("control routes stay on the plain host: a mirror forwards /metrics and /open, and answers /.offline-agent/ itself")
    func controlRoutes() async throws {
        let f = try Self.store()
        try await withLocalServer(f) { server in
            for path in ["/metrics", "/open?url=http%3A%2F%2F127.0.0.1%3A1%2Fassets%2Findex.js", "/session/restore?history=x"] {
                let response = try await Self.get(server, path)
                #expect(response.header("x-offline-source") == "origin", "\(path)")
            }
            // The page's own lifecycle control works from its mirror (same origin), never forwarded.
            let mark = try await Self.get(
                server, "/.offline-agent/mark-good?app=spa&version=1.0.0", method: "POST", headers: [("Origin", "http://\(Self.mirror):\(server.port)")])
            #expect(mark.status == 200 && mark.header("x-offline-source") == nil)
        }
    }

    // MARK: Path mirroring

    @Test("root-relative, query and directory URLs mirror the origin's paths")
    func pathMirroring() async throws {
        let f = try Self.store()
        try await withLocalServer(f) { server in
            let dir = f.directory("1.0.0", app: "spa")
            func bytes(_ name: String) -> [UInt8] { [UInt8](FileManager.default.contents(atPath: "\(dir)/\(name)")!) }
            let cases: [(String, String)] = [
                ("/assets/index.js", "assets/index.js"),
                ("/assets/index.js?v=3&x=%2F", "assets/index.js"),
                ("/assets/%61pp.css", "assets/app.css"),
                ("/", "index.html"),
                ("/?utm=1", "index.html"),
                ("/docs/", "docs/index.html"),
            ]
            for (target, file) in cases {
                let response = try await Self.get(server, target)
                #expect(response.status == 200, "\(target)")
                #expect(response.body == bytes(file), "\(target)")
                #expect(response.header("x-offline-source") == "package", "\(target)")
                #expect(response.header("x-offline-version") == "1.0.0", "\(target)")
                #expect(response.header("cache-control") == "no-cache", "\(target)")
            }
            let css = try await Self.get(server, "/assets/app.css")
            #expect(css.header("content-type") == "text/css; charset=utf-8")
            // A directory without its slash: redirected on the mirror, query kept.
            let bare = try await Self.get(server, "/docs?x=1")
            #expect(bare.status == 301 && bare.header("location") == "/docs/?x=1")
            // Validators and ranges work as on /<app>/.
            let etag = try #require(css.header("etag"))
            let again = try await Self.get(server, "/assets/app.css", headers: [("If-None-Match", etag)])
            #expect(again.status == 304 && again.header("x-offline-source") == "package")
            let range = try await Self.get(server, "/assets/app.css", headers: [("Range", "bytes=1-3")])
            #expect(range.status == 206 && range.text == "ody")
            // The other app's whitelist on another origin is not reachable through this mirror.
            let mall = try await Self.get(server, "/mall/index.html")
            #expect(mall.header("x-offline-source") == "origin")
        }
    }

    @Test("what the package does not serve goes to the origin", arguments: [
        ("GET", "/api/cart", "a path no file answers"),
        ("GET", "/assets/missing.js", "a whitelisted path naming no file"),
        ("POST", "/assets/index.js", "POST of a file"),
        ("PUT", "/index.html", "PUT"),
        ("DELETE", "/assets/index.js", "DELETE"),
        ("OPTIONS", "/", "OPTIONS"),
        ("GET", "/assets/..%2Findex.html", "an encoded parent segment"),
        ("GET", "/assets/%zz", "broken percent-encoding"),
    ])
    func forwarded(_ method: String, _ target: String, _ label: String) async throws {
        let f = try Self.store(fallback: nil)
        try await withLocalServer(f) { server in
            let response = try await Self.get(server, target, method: method)
            #expect(response.header("x-offline-source") == "origin", "\(label)")
            #expect(response.header("x-offline-version") == nil, "\(label)")
        }
    }

    @Test("a path whitelisted by no prefix is forwarded, even when the package has the file")
    func notWhitelisted() async throws {
        let f = LocalStoreFixture()
        try f.add("spa", version: "1.0.0", fixture: nil, files: ["index.js": [1], "private/x.js": [2]], whitelist: ["\(Self.origin)/assets/"])
        try await withLocalServer(f) { server in
            let r1 = try await Self.get(server, "/assets/index.js")
            #expect(r1.header("x-offline-source") == "package")
            // The package root sits at the prefix: `private/x.js` is at /assets/private/x.js, not /private/x.js.
            let r0 = try await Self.get(server, "/assets/private/x.js")
            #expect(r0.status == 200 && r0.body == [2])
            let r2 = try await Self.get(server, "/private/x.js")
            #expect(r2.header("x-offline-source") == "origin")
            let r3 = try await Self.get(server, "/assetsx/index.js")
            #expect(r3.header("x-offline-source") == "origin")
        }
    }

    // MARK: Kill switch

    @Test("the kill switch on a mirror forwards (no 302), with the reason", arguments: ["miniVersion", "rollout", "bad"])
    func killSwitch(_ condition: String) async throws {
        let f = try Self.store(miniVersion: condition == "miniVersion" ? "2.0.0" : "1.0.0", rollout: condition == "rollout" ? 0 : 100)
        if condition == "bad" { _ = try Lifecycle(store: f.store).markBad("spa", reason: "test") }
        try await withLocalServer(f) { server in
            for target in ["/assets/index.js", "/", "/shop/orders/42"] {
                let response = try await Self.get(server, target, headers: [("Sec-Fetch-Mode", "navigate")])
                #expect(response.status != 302, "\(target)")
                #expect(response.header("x-offline-source") == "origin", "\(target)")
                let expected = ["miniVersion": "below-mini-version", "rollout": "outside-rollout", "bad": "bad-version"][condition]
                #expect(response.header("x-offline-fallback") == expected, "\(target)")
            }
        }
    }

    // MARK: Single-page routes

    struct FallbackCase: CustomTestStringConvertible, Sendable {
        var label: String
        var method = "GET"
        var target: String
        var headers: [(String, String)]
        var fallback: String? = "index.html"
        var served: Bool
        var testDescription: String { label }
    }

    static let fallbackCases: [FallbackCase] = [
        .init(label: "navigation to a client-side route", target: "/shop/orders/42", headers: [("Sec-Fetch-Mode", "navigate")], served: true),
        .init(label: "navigation with a query", target: "/shop/orders/42?tab=items", headers: [("Sec-Fetch-Mode", "navigate"), ("Accept", "text/html")], served: true),
        .init(label: "HEAD navigation", method: "HEAD", target: "/shop", headers: [("Sec-Fetch-Mode", "navigate")], served: true),
        .init(label: "Accept text/html without fetch metadata", target: "/shop/cart", headers: [("Accept", "text/html,application/xhtml+xml;q=0.9")], served: true),
        .init(label: "a fetch asking for HTML is no navigation", target: "/shop/orders/42", headers: [("Sec-Fetch-Mode", "cors"), ("Accept", "text/html")], served: false),
        .init(label: "a plain fetch", target: "/shop/orders/42", headers: [("Accept", "*/*")], served: false),
        .init(label: "no headers at all", target: "/shop/orders/42", headers: [], served: false),
        .init(label: "POST navigation (a form)", method: "POST", target: "/shop/orders/42", headers: [("Sec-Fetch-Mode", "navigate")], served: false),
        .init(label: "a missing asset under a whitelisted prefix", target: "/assets/gone.js", headers: [("Sec-Fetch-Mode", "no-cors")], served: false),
        .init(label: "no fallback in the manifest", target: "/shop/orders/42", headers: [("Sec-Fetch-Mode", "navigate")], fallback: nil, served: false),
        .init(label: "a fallback naming no file of the package", target: "/shop/orders/42", headers: [("Sec-Fetch-Mode", "navigate")], fallback: "shell.html", served: false),
    ]

    @Test("navigations under a whitelisted prefix get the entry page", arguments: fallbackCases)
    func spaFallback(_ c: FallbackCase) async throws {
        let f = try Self.store(fallback: c.fallback)
        try await withLocalServer(f) { server in
            let response = try await Self.get(server, c.target, method: c.method, headers: c.headers)
            if c.served {
                #expect(response.status == 200)
                #expect(response.header("x-offline-source") == "package")
                #expect(response.header("cache-control") == "no-cache")
                #expect(response.header("content-type") == "text/html; charset=utf-8")
                let index = [UInt8](FileManager.default.contents(atPath: "\(f.directory("1.0.0", app: "spa"))/index.html")!)
                #expect(response.body == (c.method == "HEAD" ? [] : index))
            } else {
                #expect(response.header("x-offline-source") == "origin")
            }
        }
    }

    @Test("a navigation outside every whitelisted prefix is forwarded")
    func fallbackOutsideWhitelist() async throws {
        let f = LocalStoreFixture()
        try f.add(
            "spa", version: "1.0.0", fixture: nil, files: ["index.html": Array("<p>spa</p>".utf8)], whitelist: ["\(Self.origin)/app/"],
            fallback: "index.html")
        try await withLocalServer(f) { server in
            let inside = try await Self.get(server, "/app/route/1", headers: [("Sec-Fetch-Mode", "navigate")])
            #expect(inside.status == 200 && inside.text == "<p>spa</p>")
            let outside = try await Self.get(server, "/login", headers: [("Sec-Fetch-Mode", "navigate")])
            #expect(outside.header("x-offline-source") == "origin")
        }
    }

    // MARK: The set of mirrored origins

    @Test("an origin is mirrored from the request after its app is installed, and no longer after it is gone")
    func followsTheStore() async throws {
        let f = try Self.store()
        try await withLocalServer(f) { server in
            let host = "h5.other.invalid.localhost:\(server.port)"
            let r4 = try await Self.get(server, "/x/index.html", host: host)
            #expect(r4.status == 403)
            try f.add("other", version: "1.0.0", whitelist: ["https://h5.other.invalid/x/"])
            let now = try await Self.get(server, "/x/index.html", host: host)
            #expect(now.status == 200 && now.header("x-offline-source") == "package")
            try FileManager.default.removeItem(atPath: "\(f.root.path)/apps/other/current")
            let r5 = try await Self.get(server, "/x/index.html", host: host)
            #expect(r5.status == 403)
        }
    }

    // MARK: Redirects to the mirror

    @Test("/open and /session/item send URLs on a mirrored origin to the mirror")
    func openRedirects() async throws {
        let f = try Self.store()
        try await withLocalServer(f) { server in
            let port = server.port
            let cases: [(String, String)] = [
                ("http://127.0.0.1:1/shop/orders/42?tab=1#top", "http://\(Self.mirror):\(port)/shop/orders/42?tab=1#top"),
                ("http://127.0.0.1:1/assets/index.js", "http://\(Self.mirror):\(port)/assets/index.js"),
                ("http://127.0.0.1:1", "http://\(Self.mirror):\(port)/"),
                ("https://h5.example.invalid/mall/pages/about.html?x=1#top", "http://h5.example.invalid.localhost:\(port)/mall/pages/about.html?x=1#top"),
                // Same origin, not whitelisted: still the mirror (it forwards), so the page keeps its storage.
                ("https://h5.example.invalid/login", "http://h5.example.invalid.localhost:\(port)/login"),
                // Not a mirrored origin: the URL itself.
                ("https://elsewhere.example/a?b", "https://elsewhere.example/a?b"),
                ("http://h5.example.invalid/mall/", "http://h5.example.invalid/mall/"),
            ]
            for (url, location) in cases {
                let encoded = url.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
                for route in ["/open", "/session/item"] {
                    let response = try await LocalHTTP.request(port: port, "\(route)?url=\(encoded)")
                    #expect(response.status == 302, "\(route) \(url)")
                    #expect(response.header("location") == location, "\(route) \(url)")
                }
            }
            #expect(server.mirrorURL(for: URL(string: "http://127.0.0.1:1/a/b?c#d")!) == "http://\(Self.mirror):\(port)/a/b?c#d")
            #expect(server.mirrorURL(for: URL(string: "https://elsewhere.example/")!) == nil)
        }
    }

    @Test("with the kill switch on, /open still sends a mirrored origin to its mirror")
    func openUnderKillSwitch() async throws {
        let f = try Self.store(rollout: 0)
        try await withLocalServer(f) { server in
            let url = "http%3A%2F%2F127.0.0.1%3A1%2Fshop%2F"
            let response = try await LocalHTTP.request(port: server.port, "/open?url=\(url)")
            #expect(response.status == 302 && response.header("location") == "http://\(Self.mirror):\(server.port)/shop/")
        }
    }
}
