import Crypto
import Foundation
import Testing
@testable import OfflineAgent
@testable import OfflineServe
import TestSupport

/// Back/forward history restore through the loopback server: `SessionHistory`, the
/// `/session/restore` page, the `/session/item` redirect, `offline-agent session-url`,
/// and a headless Chromium walking a restored history.
@Suite("SessionRestore")
struct SessionRestoreTests {
    typealias F = LocalStoreFixture

    static func restoreTarget(_ json: String) -> String { "/session/restore?history=\(json.localQueryEncoded)" }

    static func json(_ urls: [String], currentPage: String? = nil) -> String {
        let list = urls.map { "\"\($0)\"" }.joined(separator: ",")
        return "{\"history\":[\(list)]" + (currentPage.map { ",\"currentPage\":\($0)" } ?? "") + "}"
    }

    static let three = ["https://a.example/1", "https://b.example/2", "https://c.example/3"]

    // MARK: Validation

    @Test("an invalid history gets 400 and a one-line reason", arguments: [
        ("/session/restore", "missing query parameter 'history' (percent-encoded JSON {\"history\": [URL, …], \"currentPage\": 0 or less})"),
        ("/session/restore?history=", "missing query parameter 'history' (percent-encoded JSON {\"history\": [URL, …], \"currentPage\": 0 or less})"),
        ("/session/restore?other=1", "missing query parameter 'history' (percent-encoded JSON {\"history\": [URL, …], \"currentPage\": 0 or less})"),
        (restoreTarget("{\"history\":["), "session history is not valid JSON"),
        (restoreTarget("not json"), "session history is not valid JSON"),
        (restoreTarget("[\"https://a.example/\"]"), "session history must be a JSON object {\"history\": [URL, …], \"currentPage\": 0 or less}"),
        (restoreTarget("{\"currentPage\":0}"), "session history needs 'history', an array of URL strings"),
        (restoreTarget("{\"history\":\"https://a.example/\"}"), "session history needs 'history', an array of URL strings"),
        (restoreTarget("{\"history\":[1]}"), "session history needs 'history', an array of URL strings"),
        (restoreTarget(json([])), "session history is empty; it needs at least 1 entry"),
        (restoreTarget(json((0...50).map { "https://a.example/\($0)" })), "session history has 51 entries; at most 50 are allowed"),
        (restoreTarget(json(["javascript:alert(1)"])), "history[0] is not an absolute http or https URL"),
        (restoreTarget(json(["https://a.example/", "file:///etc/passwd"])), "history[1] is not an absolute http or https URL"),
        (restoreTarget(json(["https://a.example/", "https://b.example/", "data:text/html,x"])), "history[2] is not an absolute http or https URL"),
        (restoreTarget(json(["/mall/index.html"])), "history[0] is not an absolute http or https URL"),
        (restoreTarget(json(["mall/index.html"])), "history[0] is not an absolute http or https URL"),
        (restoreTarget(json(["http://"])), "history[0] is not an absolute http or https URL"),
        (restoreTarget(json(["ftp://a.example/x"])), "history[0] is not an absolute http or https URL"),
        (restoreTarget(json(three, currentPage: "1")), "'currentPage' 1 is outside -2...0 (0 is the last entry, -1 the one before it)"),
        (restoreTarget(json(three, currentPage: "-3")), "'currentPage' -3 is outside -2...0 (0 is the last entry, -1 the one before it)"),
        (restoreTarget(json(three, currentPage: "-1.5")), "'currentPage' must be an integer"),
        (restoreTarget(json(three, currentPage: "\"-1\"")), "'currentPage' must be an integer"),
    ])
    func rejects(target: String, reason: String) async throws {
        let f = LocalStoreFixture()
        try await withLocalServer(f) { server in
            let response = try await LocalHTTP.request(port: server.port, target)
            #expect(response.status == 400)
            #expect(response.header("content-type") == "text/plain; charset=utf-8")
            #expect(response.text == reason + "\n")
        }
    }

    @Test("SessionHistory round-trips its JSON and checks entries made in code")
    func library() throws {
        let history = try SessionHistory(entries: Self.three.map { URL(string: $0)! }, currentPage: -1)
        #expect(history.currentIndex == 1)
        #expect(String(decoding: history.json, as: UTF8.self)
            == "{\"currentPage\":-1,\"history\":[\"https://a.example/1\",\"https://b.example/2\",\"https://c.example/3\"]}")
        #expect(try SessionHistory(json: history.json) == history)
        // currentPage may be left out: the last entry is current.
        #expect(try SessionHistory(json: Data(Self.json(["https://a.example/"]).utf8)).currentPage == 0)
        #expect(try SessionHistory(entries: (1...50).map { URL(string: "http://a.example/\($0)")! }).entries.count == 50)

        let url = try history.restoreURL(port: 8421)
        #expect(url.absoluteString.hasPrefix("http://127.0.0.1:8421/session/restore?history=%7B%22currentPage%22%3A-1%2C"))
        #expect(try history.restoreURL(host: "::1", port: 1).absoluteString.hasPrefix("http://[::1]:1/session/restore?"))
        #expect(SessionHistory.itemPath(for: URL(string: "https://a.example/x?q=1&r=2#f")!)
            == "/session/item?url=https%3A%2F%2Fa.example%2Fx%3Fq%3D1%26r%3D2%23f")

        for (entries, current) in [([String](), 0), (["javascript:alert(1)"], 0), (["https://a.example/"], -1)] {
            #expect(throws: OfflineAgentError.self) {
                try SessionHistory(entries: entries.map { URL(string: $0)! }, currentPage: current)
            }
        }
        #expect(throws: OfflineAgentError.self) { try history.restoreURL(port: 0) }
        #expect(throws: OfflineAgentError.self) { try history.restoreURL(host: "a b", port: 80) }
        // 50 URLs of 2 KiB each would make a URL the server cannot read: refused up front.
        let long = try SessionHistory(entries: (1...50).map { URL(string: "https://a.example/\($0)/" + String(repeating: "x", count: 2048))! })
        #expect(throws: OfflineAgentError.self) { try long.restoreURL(port: 8421) }
    }

    // MARK: The restore page

    @Test("the restore page embeds the entries as local item paths, with no-store and a hash-only CSP")
    func restorePage() async throws {
        let f = LocalStoreFixture()
        try await withLocalServer(f) { server in
            let history = try SessionHistory(entries: Self.three.map { URL(string: $0)! }, currentPage: -2)
            let target = try history.restoreURL(port: server.port)
            let response = try await LocalHTTP.request(port: server.port, "/session/restore?\(target.query!)")
            #expect(response.status == 200)
            #expect(response.header("content-type") == "text/html; charset=utf-8")
            #expect(response.header("cache-control") == "no-store")
            #expect(response.header("referrer-policy") == "no-referrer")
            #expect(response.header("content-length") == String(response.body.count))

            // The one inline script is the one the policy allows, by hash.
            let page = response.text
            let script = try #require(Self.between(page, "<script>", "</script>"))
            let hash = Data(SHA256.hash(data: Data(script.utf8))).base64EncodedString()
            #expect(response.header("content-security-policy")
                == "default-src 'none'; script-src 'sha256-\(hash)'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")

            let data = try #require(Self.between(page, "<script type=\"application/json\" id=\"session\">", "</script>"))
            let object = try #require(try JSONSerialization.jsonObject(with: Data(data.utf8)) as? [String: Any])
            #expect(object["currentPage"] as? Int == -2)
            #expect(object["items"] as? [String] == Self.three.map { SessionHistory.itemPath(for: URL(string: $0)!) })

            let head = try await LocalHTTP.request(port: server.port, "/session/restore?\(target.query!)", method: "HEAD")
            #expect(head.status == 200 && head.body.isEmpty)
            #expect(head.header("content-length") == response.header("content-length"))
        }
    }

    @Test("markup in a URL never reaches the page unescaped", arguments: [
        "https://a.example/?q=</script><script>alert(1)</script>",
        "https://a.example/%3C/script%3E%3Cscript%3Ealert(1)%3C/script%3E",
        "https://a.example/x#</script><script>alert(1)</script>",
        "https://a.example/?q=%E2%80%A8&r=<!--",
    ])
    func escapesMarkup(url: String) async throws {
        let f = LocalStoreFixture()
        try await withLocalServer(f) { server in
            let json = String(decoding: try JSONSerialization.data(withJSONObject: ["history": [url]]), as: UTF8.self)
            let response = try await LocalHTTP.request(port: server.port, Self.restoreTarget(json))
            #expect(response.status == 200, "\(response.text)")
            let page = response.text
            #expect(page.components(separatedBy: "<script").count == 3)
            #expect(page.components(separatedBy: "</script>").count == 3)
            #expect(!page.contains("alert(1)<"))
            #expect(!page.contains("<!--"))
            let data = try #require(Self.between(page, "id=\"session\">", "</script>"))
            #expect(data.unicodeScalars.allSatisfy { $0.isASCII && $0 != "<" && $0 != ">" && $0 != "&" })
        }
    }

    @Test("scriptSafe escapes what could end a script element, and the JSON keeps its value")
    func scriptSafe() throws {
        let json = String(decoding: try JSONSerialization.data(withJSONObject: ["a": "</script><!--&\u{2028}\u{2029}é"], options: [.withoutEscapingSlashes]), as: UTF8.self)
        let safe = LocalSessionPage.scriptSafe(json)
        #expect(!safe.contains("<") && !safe.contains(">") && !safe.contains("&"))
        #expect(!safe.contains("\u{2028}") && !safe.contains("\u{2029}"))
        #expect(safe.contains("\\u003c/script\\u003e\\u003c!--\\u0026\\u2028\\u2029é"))
        let back = try JSONSerialization.jsonObject(with: Data(safe.utf8)) as? [String: String]
        #expect(back == ["a": "</script><!--&\u{2028}\u{2029}é"])
    }

    // MARK: /session/item

    @Test("/session/item redirects like /open: to the offline copy when whitelisted, else to the URL")
    func item() async throws {
        let f = LocalStoreFixture()
        try f.add(version: "1.0.0")
        try await withLocalServer(f) { server in
            let offline = try await LocalHTTP.request(
                port: server.port, "/session/item?url=\((F.whitelist + "pages/about.html?x=1#top").localQueryEncoded)")
            #expect(offline.status == 302)
            // On a mirrored origin: its mirror, same path, query and fragment.
            #expect(offline.header("location") == "http://h5.example.invalid.localhost:\(server.port)/mall/pages/about.html?x=1#top")
            #expect(offline.header("cache-control") == "no-store")
            let page = try await LocalHTTP.request(port: server.port, "/mall/pages/about.html?x=1")
            #expect(page.status == 200)

            let online = try await LocalHTTP.request(port: server.port, "/session/item?url=\("https://other.example/a?b=1".localQueryEncoded)")
            #expect(online.status == 302 && online.header("location") == "https://other.example/a?b=1")
            #expect(server.metrics.offlineHits(app: "mall") == 1)
            #expect(server.metrics.networkFallbacks(app: nil, reason: .notWhitelisted) == 1)
        }
    }

    @Test("/session/item refuses anything but an absolute http or https URL", arguments: [
        "/session/item", "/session/item?url=", "/session/item?other=1",
        "/session/item?url=\("javascript:alert(1)".localQueryEncoded)",
        "/session/item?url=\("file:///etc/passwd".localQueryEncoded)",
        "/session/item?url=\("data:text/html,x".localQueryEncoded)",
        "/session/item?url=\("/mall/index.html".localQueryEncoded)",
        "/session/item?url=\("//evil.example/x".localQueryEncoded)",
    ])
    func itemRejects(target: String) async throws {
        let f = LocalStoreFixture()
        try await withLocalServer(f) { server in
            let response = try await LocalHTTP.request(port: server.port, target)
            #expect(response.status == 400)
            #expect(response.header("location") == nil)
        }
    }

    @Test("an app named session is still served under /session/ but for the two routes")
    func appNamedSession() async throws {
        let f = LocalStoreFixture()
        try f.add("session", version: "1.0.0", whitelist: ["https://h5.example.invalid/session/"])
        try await withLocalServer(f) { server in
            let file = try await LocalHTTP.request(port: server.port, "/session/index.html")
            #expect(file.status == 200 && file.body == F.fixtureBytes("1.0.0", "index.html"))
            let bare = try await LocalHTTP.request(port: server.port, "/session")
            #expect(bare.status == 301 && bare.header("location") == "/session/")
            let item = try await LocalHTTP.request(
                port: server.port, "/session/item?url=\("https://h5.example.invalid/session/index.html".localQueryEncoded)")
            #expect(item.status == 302 && item.header("location") == "http://h5.example.invalid.localhost:\(server.port)/session/index.html")
            let restore = try await LocalHTTP.request(port: server.port, Self.restoreTarget(Self.json(Self.three)))
            #expect(restore.status == 200 && restore.header("content-type") == "text/html; charset=utf-8")
        }
    }

    // MARK: CLI

    @Test("session-url prints a restore URL whose history parses back")
    func cliRoundTrip() async throws {
        for (arguments, current) in [(["--current", "-1"], -1), (["--current=-2"], -2), ([], 0)] {
            let result = try await CLI.run(["session-url", "--port", "9123"] + arguments + Self.three)
            #expect(result.status == 0, "\(result.stderr)")
            let printed = result.stdout.trimmingCharacters(in: .newlines)
            let url = try #require(URLComponents(string: printed))
            #expect(url.scheme == "http" && url.host == "127.0.0.1" && url.port == 9123 && url.path == "/session/restore")
            let json = try #require(url.queryItems?.first { $0.name == "history" }?.value)
            let history = try SessionHistory(json: Data(json.utf8))
            #expect(history.entries.map(\.absoluteString) == Self.three)
            #expect(history.currentPage == current)
        }
        let v6 = try await CLI.run(["session-url", "--host", "::1", "--port", "80", "https://a.example/"])
        #expect(v6.status == 0 && v6.stdout.hasPrefix("http://[::1]:80/session/restore?history="))
    }

    @Test("session-url exits 64 with one line for bad input", arguments: [
        [String](),
        (0...50).map { "https://a.example/\($0)" },
        ["javascript:alert(1)"],
        ["file:///etc/passwd"],
        ["relative/page.html"],
        ["--current", "1", "https://a.example/"],
        ["--current", "-3"] + three,
        ["--current", "x", "https://a.example/"],
        ["--port", "0", "https://a.example/"],
        ["--port", "70000", "https://a.example/"],
    ])
    func cliRejects(arguments: [String]) async throws {
        let result = try await CLI.run(["session-url"] + arguments)
        #expect(result.status == 64, "\(result.stdout) \(result.stderr)")
        #expect(result.stdout.isEmpty)
        #expect(!result.stderr.isEmpty)
    }

    @Test("session-url's reasons are the library's")
    func cliReasons() async throws {
        let result = try await CLI.run(["session-url", "--current", "1", "https://a.example/"])
        #expect(result.stderr == "offline-agent: usage: 'currentPage' 1 is outside 0...0 (0 is the last entry, -1 the one before it)\n")
        let empty = try await CLI.run(["session-url"])
        #expect(empty.stderr == "offline-agent: usage: session history is empty; it needs at least 1 entry\n")
    }

    // MARK: A real browser

    /// Pages A, B and C on one origin walk a restored history on `pageshow`, keeping a
    /// step counter and a log in `sessionStorage` (one per tab and origin): at B first
    /// → back; at A → forward; at B → forward; at C the walk ends. Each step logs the
    /// page and `history.length` and shows the log, so the last page's DOM tells the
    /// whole walk. `/len` only shows `history.length`.
    static func walkPage(_ name: String) -> [UInt8] {
        let script = name == "len"
            ? "document.getElementById('log').textContent = 'len=' + history.length;"
            : """
            addEventListener("pageshow", function () {
              var step = Number(sessionStorage.getItem("step") || 0);
              var log = (sessionStorage.getItem("log") || "") + document.title + " len=" + history.length + ";";
              sessionStorage.setItem("step", String(step + 1));
              sessionStorage.setItem("log", log);
              document.getElementById("log").textContent = log;
              if (step === 0) history.back();
              else if (step === 1 || step === 2) history.forward();
            });
            """
        return Array("<!DOCTYPE html><title>\(name)</title><p id=\"log\"></p><script>\(script)</script>".utf8)
    }

    /// Chromium's DOM once the pages' scripts ran and navigated. With a new document per
    /// navigation (RenderDocument), virtual time stops after a cross-document back/forward
    /// and --dump-dom never comes.
    static func dumpDOM(_ url: String) async throws -> String {
        try await BrowserTests.dumpDOM(url, flags: ["--disable-features=RenderDocument"])
    }

    @Test(
        "headless Chromium restores 3 entries with the middle one current; back and forward reach the others",
        .enabled(if: BrowserTests.chromium != nil, "chromium is not installed (apt-get install -y chromium)"))
    func chromiumWalksRestoredHistory() async throws {
        let pages = try ScriptedServer { request in
            guard ["/A", "/B", "/C", "/len"].contains(request.path) else { return .status(404) }
            return .ok(Self.walkPage(String(request.path.dropFirst())), headers: [("Content-Type", "text/html; charset=utf-8")])
        }
        defer { pages.stop() }
        // Headless Chromium opens a URL in a tab that already has an entry (its initial
        // about:blank): count what precedes a first page load.
        let baseline = try await Self.dumpDOM("\(pages.baseURL)/len")
        let length = try #require(Self.between(baseline, "<p id=\"log\">len=", "</p>").flatMap { Int($0) })
        let before = length - 1

        let f = LocalStoreFixture()
        try await withLocalServer(f) { server in
            let history = try SessionHistory(entries: ["A", "B", "C"].map { URL(string: "\(pages.baseURL)/\($0)")! }, currentPage: -1)
            let dom = try await Self.dumpDOM(try history.restoreURL(port: server.port).absoluteString)
            let n = before + 3
            #expect(dom.contains("<p id=\"log\">B len=\(n);A len=\(n);B len=\(n);C len=\(n);</p>"), "\(dom.prefix(3000))")
            #expect(dom.contains("<title>C</title>"))
            // The current entry was the first page loaded: the restore loaded nothing else.
            let loads = pages.requests.map(\.path).filter { ["/A", "/B", "/C"].contains($0) }
            #expect(loads.first == "/B", "\(loads)")
            // A and C came through /session/item (network: not whitelisted), B at least once.
            #expect(server.metrics.networkFallbacks(app: nil, reason: .notWhitelisted) >= 3)
        }
    }

    // MARK: Helpers

    /// The text between the first `start` and the next `end`.
    static func between(_ text: String, _ start: String, _ end: String) -> String? {
        guard let open = text.range(of: start), let close = text.range(of: end, range: open.upperBound..<text.endIndex) else { return nil }
        return String(text[open.upperBound..<close.lowerBound])
    }
}
