import Crypto
import Foundation
import Hummingbird
import OfflineHTTP
import Synchronization
import Testing
@testable import OfflineAgent
@testable import OfflineServe
import TestSupport

/// Headless Chromium on mirrored origins (`docs/PROTOCOL.md`, "Mirrored origins"): a
/// single-page app built the usual way (root-relative `/assets/…`, a client-side router)
/// renders from the package through its origin's mirror host, deep links included, and
/// two apps on two origins do not share `localStorage`.
@Suite("Mirror browser", .serialized)
struct MirrorBrowserTests {
    static let indexHTML = """
        <!doctype html>
        <html><head><meta charset="utf-8"><link rel="stylesheet" href="/assets/app.css">
        <script src="/assets/index.js" defer></script></head>
        <body><div id="app">loading</div></body></html>
        """
    /// The router: renders the route from `location.pathname`, and proves the stylesheet applied.
    static let indexJS = """
        document.addEventListener("DOMContentLoaded", function () {
          var path = location.pathname, view;
          var order = path.match(/^\\/shop\\/orders\\/(\\d+)$/);
          if (path === "/") view = "home";
          else if (order) view = "order-" + order[1];
          else view = "not-found";
          var styled = getComputedStyle(document.body).getPropertyValue("--spa-styled").trim();
          document.getElementById("app").innerHTML =
            '<span id="route">' + view + '</span><span id="styled">' + (styled || "no") + '</span>';
        });
        """
    static let appCSS = "body { --spa-styled: yes; }"

    /// The storage probe: `?step=write` stores this app's mark and goes to `next`;
    /// `?step=read` shows what this origin's `localStorage` holds, with what came before.
    static func storageHTML(_ mark: String) -> String {
        """
        <!doctype html><html><body><div id="out">loading</div><script>
        var q = new URLSearchParams(location.search);
        var seen = localStorage.getItem("mark") || "none";
        if (q.get("step") === "write") {
          localStorage.setItem("mark", "\(mark)");
          location.replace(q.get("next") + "&before=" + encodeURIComponent(q.get("before") || "") + "\(mark)-saw-" + seen + ";");
        } else {
          document.getElementById("out").textContent = (q.get("before") || "") + "\(mark)-saw-" + seen;
        }
        </script></body></html>
        """
    }

    /// The origin's stand-in: counts every request and answers 404 (a package that
    /// renders from the mirror needs nothing from it).
    final class Upstream: @unchecked Sendable {
        let server: ScriptedServer
        init() throws { server = try ScriptedServer { _ in .status(404) } }
        var port: Int { server.port }
        var paths: [String] { server.requests.map(\.path) }
    }

    @Test(
        "an SPA renders from the package on its origin's mirror, deep links through the fallback; the upstream sees no asset request",
        .enabled(if: BrowserTests.chromium != nil, "chromium is not installed (apt-get install -y chromium)"))
    func singlePageApp() async throws {
        let upstream = try Upstream()
        defer { upstream.server.stop() }
        let origin = "http://127.0.0.1:\(upstream.port)"
        let f = LocalStoreFixture()
        try f.add(
            "spa", version: "1.0.0", fixture: nil,
            files: [
                "index.html": Array(Self.indexHTML.utf8), "assets/index.js": Array(Self.indexJS.utf8),
                "assets/app.css": Array(Self.appCSS.utf8),
            ],
            whitelist: ["\(origin)/"], fallback: "index.html")
        try await withLocalServer(f, deviceID: "browser") { server in
            let mirror = try #require(server.mirrorURL(for: URL(string: "\(origin)/")!))
            #expect(mirror == "http://127.0.0.1.http-\(upstream.port).localhost:\(server.port)/")

            let home = try await BrowserTests.dumpDOM(mirror)
            #expect(home.contains("<span id=\"route\">home</span>"), "\(home.prefix(2000))")
            #expect(home.contains("<span id=\"styled\">yes</span>"), "\(home.prefix(2000))")

            // A deep link: the navigation gets the entry page, whose router reads the path.
            let deep = try await BrowserTests.dumpDOM(mirror + "shop/orders/42?tab=items")
            #expect(deep.contains("<span id=\"route\">order-42</span>"), "\(deep.prefix(2000))")
            #expect(deep.contains("<span id=\"styled\">yes</span>"))

            // Through /open, as a host app loads it.
            let open = try await BrowserTests.dumpDOM("\(server.baseURL)/open?url=\("\(origin)/shop/orders/7".localQueryEncoded)")
            #expect(open.contains("<span id=\"route\">order-7</span>"), "\(open.prefix(2000))")

            // Nothing of the package came from the origin, nor any of the page's routes (a
            // favicon may be asked for; another test's client may hit this loopback port
            // after its own server on the same number closed, e.g. a report POST).
            let pagePaths = upstream.paths.filter { $0 == "/" || $0.hasPrefix("/assets") || $0.hasPrefix("/shop") || $0.hasSuffix(".html") }
            #expect(pagePaths == [], "\(upstream.paths)")
        }
    }

    @Test(
        "two apps on two origins: localStorage written on one mirror is not visible on the other",
        .enabled(if: BrowserTests.chromium != nil, "chromium is not installed (apt-get install -y chromium)"))
    func storageIsolation() async throws {
        let f = LocalStoreFixture()
        // Two origins nothing listens on: only the mirrors answer.
        try f.add("a", version: "1.0.0", fixture: nil, files: ["index.html": Array(Self.storageHTML("a").utf8)], whitelist: ["http://127.0.0.1:1/"])
        try f.add("b", version: "1.0.0", fixture: nil, files: ["index.html": Array(Self.storageHTML("b").utf8)], whitelist: ["http://127.0.0.1:2/"])
        try await withLocalServer(f, deviceID: "browser") { server in
            let a = "http://127.0.0.1.http-1.localhost:\(server.port)/"
            let b = "http://127.0.0.1.http-2.localhost:\(server.port)/"
            // a writes, then b writes, then a reads: one browser, one profile, three origins' worth of navigation.
            let last = "\(a)?step=read"
            let second = "\(b)?step=write&next=\(last.localQueryEncoded)"
            let dom = try await BrowserTests.dumpDOM("\(a)?step=write&next=\(second.localQueryEncoded)")
            // a saw nothing at first, b saw nothing of a's mark, and a still had its own afterwards.
            #expect(dom.contains("a-saw-none;b-saw-none;a-saw-a"), "\(dom.prefix(2000))")
        }
    }

    // MARK: Through the real proxy

    static let apiHTML = """
        <!doctype html><html><head><meta charset="utf-8"></head>
        <body><div id="rendered">from-package</div><div id="out"></div><script src="/assets/api.js"></script></body></html>
        """
    /// First load: POST 1 MiB (a `Blob`) to `/api/echo`, log in, reload; after the reload
    /// show the echo and `/api/me`; `?step=offline` shows what `/api/me` answers.
    static let apiJS = """
        (async function () {
          var out = document.getElementById("out");
          function show(t) { out.textContent += t + ";"; }
          var q = new URLSearchParams(location.search);
          try {
            if (q.get("step") === "reload") {
              show(sessionStorage.getItem("echo"));
              var me = await fetch("/api/me");
              show("me:" + (await me.text()));
              return;
            }
            if (q.get("step") === "offline") {
              var r = await fetch("/api/me");
              show(r.ok ? "api-ok" : "api-error:" + r.status);
              return;
            }
            var bytes = new Uint8Array(1048576);
            for (var i = 0; i < bytes.length; i++) bytes[i] = (i * 31 + 7) & 255;
            var echo = await fetch("/api/echo", { method: "POST", body: new Blob([bytes]) });
            sessionStorage.setItem("echo", "echo:" + (await echo.text()));
            var login = await fetch("/api/login", { method: "POST", body: "user=alice" });
            if (!login.ok) { show("login-failed:" + login.status); return; }
            location.replace("/?step=reload");
          } catch (e) { show("error:" + e); }
        })();
        """

    /// The origin: `/api/echo` hashes the body it receives, `/api/login` sets a session
    /// cookie, `/api/me` says whether the cookie came back; every request is logged.
    final class RequestLog: Sendable {
        let entries = Mutex<[String]>([])
        let stopped = Mutex(false)
    }

    static func startAPIOrigin(log: RequestLog) async throws -> BackgroundService {
        try await ProxyHarness.startServer { request in
            let path = request.uri.path
            log.entries.withLock { $0.append("\(request.method.rawValue) \(path)") }
            var headers = HTTPFields()
            headers[.contentType] = "text/plain; charset=utf-8"
            switch path {
            case "/api/echo":
                var hasher = SHA256()
                var length = 0
                for try await chunk in request.body {
                    chunk.withUnsafeReadableBytes { hasher.update(bufferPointer: $0) }
                    length += chunk.readableBytes
                }
                let hex = hasher.finalize().map { String(format: "%02x", $0) }.joined()
                return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: "\(length):\(hex)")))
            case "/api/login":
                headers[.setCookie] = "session=alice-token; Path=/; HttpOnly; SameSite=Lax"
                return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: "ok")))
            case "/api/me":
                let cookie = request.headers[.cookie] ?? ""
                let who = cookie.contains("session=alice-token") ? "alice" : "anonymous"
                return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: who)))
            default:
                return Response(status: .notFound, headers: headers, body: .init(byteBuffer: ByteBuffer(string: "no\n")))
            }
        }
    }

    @Test(
        "through the mirror: a 1 MiB fetch POST reaches the origin byte for byte, a login cookie survives a reload; origin stopped: the page still renders, the API fails cleanly",
        .enabled(if: BrowserTests.chromium != nil, "chromium is not installed (apt-get install -y chromium)"))
    func apiThroughMirror() async throws {
        let log = RequestLog()
        let upstream = try await Self.startAPIOrigin(log: log)
        let origin = "http://127.0.0.1:\(upstream.port)"
        let f = LocalStoreFixture()
        try f.add(
            "api", version: "1.0.0", fixture: nil,
            files: ["index.html": Array(Self.apiHTML.utf8), "assets/api.js": Array(Self.apiJS.utf8)],
            whitelist: ["\(origin)/"], fallback: "index.html")
        var expected = [UInt8](repeating: 0, count: 1 << 20)
        for i in expected.indices { expected[i] = UInt8((i * 31 + 7) & 255) }
        let sha = SHA256.hash(data: expected).map { String(format: "%02x", $0) }.joined()
        defer { if !log.stopped.withLock({ $0 }) { Task { await upstream.stop() } } }
        try await withLocalServer(f, deviceID: "browser") { server in
            let mirror = try #require(server.mirrorURL(for: URL(string: "\(origin)/")!))
            let online = try await BrowserTests.dumpDOM(mirror)
            #expect(online.contains("from-package"), "\(online.prefix(2000))")
            #expect(online.contains("echo:\(1 << 20):\(sha);me:alice;"), "\(online.prefix(2000))")
            let requests = log.entries.withLock { $0 }.filter { $0 != "GET /favicon.ico" }
            #expect(requests == ["POST /api/echo", "POST /api/login", "GET /api/me"], "\(requests)")

            await upstream.stop()
            log.stopped.withLock { $0 = true }
            let offline = try await BrowserTests.dumpDOM(mirror + "?step=offline")
            #expect(offline.contains("from-package"), "\(offline.prefix(2000))")
            #expect(offline.contains("api-error:502;"), "\(offline.prefix(2000))")
        }
    }
}
