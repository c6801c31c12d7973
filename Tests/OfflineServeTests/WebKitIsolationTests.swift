import Foundation
import OfflineServe
import Synchronization
import Testing
@testable import OfflineAgent
import TestSupport

/// Issue 39, rows 1–3 in WebKitGTK (the kiosk's engine; `BrowserTests` has Chromium): real
/// syncs into a root, `serve` (`LocalServer`) in front of it, and one web view
/// (`WebKitView`) whose pages keep running across a sync, as a kiosk's do.
@Suite("WebKitGTK isolation", .serialized)
struct WebKitIsolationTests {
    static let mall = "https://h5.example.invalid/mall/"

    /// Every page reports through this (see Tests/WebKit/webkit_pages.py).
    static let report = #"function report(x) { document.title = "r" + (window.reportNumber || 0) + ":" + JSON.stringify(x); }"#

    /// A stored zip of `files` (path → HTML body script), each page with `report`.
    static func package(_ files: [String: String]) -> [UInt8] {
        var zip = ZipBuilder()
        for (path, script) in files.sorted(by: { $0.key < $1.key }) {
            zip.file(path, "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>page</title></head><body><script>\n\(report)\n\(script)\n</script></body></html>")
        }
        return zip.build()
    }

    /// Offers `app` at `version` with `files` on `whitelist`, next to what is offered already.
    static func offer(_ h: SyncHarness, _ offers: Offers, app: String, version: String, whitelist: [String], files: [String: String],
                      trialLaunches: Int? = nil) {
        let bytes = package(files)
        let sha = PackageFixture.sha256(bytes)
        h.origin.put("\(app)-\(version).zip", bytes)
        var manifest: [String: Any] = [
            "app": app, "version": version, "miniVersion": "1.0.0", "isPatch": false, "url": "files/\(app)-\(version).zip",
            "size": bytes.count, "sha256": sha, "packageSha256": sha, "whitelist": whitelist, "rollout": 100,
        ]
        if let trialLaunches { manifest["trialLaunches"] = trialLaunches }
        offers.set(app, try! JSONSerialization.data(withJSONObject: manifest, options: [.sortedKeys]))
        h.origin.setManifestReply { request in
            guard let body = request.query["app"].flatMap(offers.body) else { return .status(404) }
            return .ok([UInt8](body))
        }
    }

    /// The manifest each app is offered.
    final class Offers: Sendable {
        private let bodies = Mutex<[String: Data]>([:])
        func set(_ app: String, _ body: Data) { bodies.withLock { $0[app] = body } }
        func body(_ app: String) -> Data? { bodies.withLock { $0[app] } }
    }

    static func sync(_ h: SyncHarness, _ app: String) async -> SyncReport {
        await h.agent().sync(app: app, manifest: h.origin.manifestURL, options: SyncOptions(force: true))
    }

    static func open(_ server: RunningLocalServer, _ url: String) -> String {
        "\(server.baseURL)/open?url=\(url.localQueryEncoded)"
    }

    /// Runs `body` with a started server on `h`'s root and a web view, stopping both however it ends.
    static func withView(_ h: SyncHarness, _ body: (RunningLocalServer, WebKitView) async throws -> Void) async throws {
        let server = try await LocalServer(configuration: .init(root: h.root.path, port: 0, deviceID: "webkit", maxTrialLaunches: 5)).start()
        let view: WebKitView
        do { view = try WebKitView() } catch {
            await server.stop()
            throw error
        }
        do {
            try #require(try await view.ready(), "the web view started")
            try await body(server, view)
        } catch {
            await view.close()
            await server.stop()
            throw error
        }
        await view.close()
        await server.stop()
    }

    @Test("row 1: an app listing bank's origin is refused; bank's URLs show bank's pages, and bank's localStorage is read only by bank")
    func anotherAppsOrigin() async throws {
        let h = try SyncHarness()
        let offers = Offers()
        Self.offer(h, offers, app: "mall", version: "1.0.0", whitelist: [Self.mall], files: [
            "index.html": #"localStorage.setItem("secret", "bank-session"); report({app: "mall", page: "index", secret: localStorage.getItem("secret")});"#,
            "login/index.html": #"report({app: "mall", page: "login", secret: localStorage.getItem("secret")});"#,
        ])
        #expect(await Self.sync(h, "mall").result == .updated)
        // Another publisher's app: its own path, and the longer prefix of bank's login page.
        let evil = #"""
            fetch("/.offline-agent/mark-bad?app=mall&version=1.0.0", {method: "POST"}).catch(() => {});
            report({app: "evil", stolen: localStorage.getItem("secret")});
            """#
        Self.offer(h, offers, app: "evil", version: "1.0.0",
                   whitelist: ["https://h5.example.invalid/evil-corp/", Self.mall + "login/"], files: ["index.html": evil])
        let refused = await Self.sync(h, "evil")
        #expect(refused.error?.cause == .originClaimed, "\(refused.error?.description ?? "\(refused.result)")")
        #expect(h.store.active("evil") == nil)

        try await Self.withView(h) { server, view in
            let index = try await view.load(Self.open(server, Self.mall + "index.html")) as? [String: Any]
            #expect(index?["app"] as? String == "mall" && index?["secret"] as? String == "bank-session", "\(String(describing: index))")
            // Bank's login URL is bank's page, on bank's origin, with bank's storage.
            let login = try await view.load(Self.open(server, Self.mall + "login/index.html")) as? [String: Any]
            #expect(login?["app"] as? String == "mall" && login?["page"] as? String == "login", "\(String(describing: login))")
            #expect(login?["secret"] as? String == "bank-session")
            // Evil's own path on that origin serves nothing of evil's.
            let corp = try await view.load(Self.open(server, "https://h5.example.invalid/evil-corp/index.html"))
            #expect((corp as? [String: Any])?["app"] == nil, "\(String(describing: corp))")
        }
        let status = await h.agent().lifecycle(app: "mall")
        #expect(status.version?.description == "1.0.0" && status.badVersions.isEmpty, "\(status)")
    }

    @Test("row 2: on the plain host, a page that rewrites its path to another app's gets 404 from mark-bad and mark-good, and nothing changes")
    func plainHostHasNoLifecycle() async throws {
        let h = try SyncHarness()
        let offers = Offers()
        Self.offer(h, offers, app: "mall", version: "1.0.0", whitelist: [Self.mall], files: ["index.html": "report({app: \"mall\"});"])
        #expect(await Self.sync(h, "mall").result == .updated)
        let marks = #"""
            Promise.all(["mark-bad", "mark-good"].map((action) =>
              fetch("/.offline-agent/" + action + "?app=mall&version=1.0.0", {method: "POST"}).then((r) => r.status, () => 0)))
              .then((statuses) => report({path: location.pathname, statuses}));
            """#
        Self.offer(h, offers, app: "evil", version: "1.0.0", whitelist: ["https://evil.example.invalid/evil/"],
                   files: ["index.html": "history.replaceState(null, \"\", \"/mall/x\");\n" + marks])
        #expect(await Self.sync(h, "evil").result == .updated)
        #expect(await h.agent().lifecycle(app: "mall").state == .trial)

        try await Self.withView(h) { server, view in
            let attack = try await view.load("\(server.baseURL)/evil/index.html") as? [String: Any]
            #expect(attack?["path"] as? String == "/mall/x", "\(String(describing: attack))")
            #expect(attack?["statuses"] as? [Int] == [404, 404], "\(String(describing: attack))")
            // Not even mall's own page, on the plain host, speaks for mall.
            _ = try await view.load("\(server.baseURL)/mall/index.html")
            let own = try await view.eval(marks) as? [String: Any]
            #expect(own?["statuses"] as? [Int] == [404, 404], "\(String(describing: own))")
            var status = await h.agent().lifecycle(app: "mall")
            #expect(status.state == .trial && status.badVersions.isEmpty, "\(status)")

            // The same confirmation from mall's mirror origin is heard (the test can see a mark land).
            _ = try await view.load(Self.open(server, Self.mall + "index.html"))
            let confirm = try await view.eval(#"fetch("/.offline-agent/mark-good?app=mall&version=1.0.0", {method: "POST"}).then((r) => report(r.status));"#)
            #expect(confirm as? Int == 200, "\(String(describing: confirm))")
            status = await h.agent().lifecycle(app: "mall")
            #expect(status.state == .good, "\(status)")
        }
    }

    /// docs/HOST-APPS.md's snippet ("How a page confirms its own version"), exactly as written there.
    static func hostAppsSnippet() throws -> String {
        let doc = try String(contentsOfFile: "\(Repo.root)/docs/HOST-APPS.md", encoding: .utf8)
        let section = try #require(doc.range(of: "### How a page confirms its own version"))
        let open = try #require(doc.range(of: "```js\n", range: section.upperBound..<doc.endIndex))
        let close = try #require(doc.range(of: "```", range: open.upperBound..<doc.endIndex))
        return String(doc[open.upperBound..<close.lowerBound])
    }

    /// A page of `version` running HOST-APPS.md's snippet; `mark(action)` posts that action
    /// for the version the page read from its own response.
    static func confirmingPage(_ version: String) throws -> [String: String] {
        let script = try hostAppsSnippet() + #"""
            window.mark = (action) => fetch(`/.offline-agent/${action}?app=mall&version=${encodeURIComponent(own ? own.description : "")}`, {method: "POST"})
              .then((r) => r.text().then((body) => report({status: r.status, body})), (e) => report({error: String(e)}));
            report({shipped: "\#(version)", own: own ? own.description : null});
            """#
        return ["index.html": script]
    }

    @Test("row 3: a page still open from 1.0.0 cannot confirm or mark bad the 1.1.0 a sync put on trial; the page of 1.1.0 confirms it (HOST-APPS.md's snippet, in WebKitGTK)")
    func oldPageCannotConfirmNewVersion() async throws {
        let h = try SyncHarness()
        let offers = Offers()
        Self.offer(h, offers, app: "mall", version: "1.0.0", whitelist: [Self.mall], files: try Self.confirmingPage("1.0.0"))
        #expect(await Self.sync(h, "mall").result == .updated)

        try await Self.withView(h) { server, view in
            // As HOST-APPS.md tells a WebKitGTK host: ask /open itself (a launch) and load where it
            // points (WebKit hides the Server-Timing of a document reached through a cross-origin redirect).
            let opened = try await LocalHTTP.request(port: server.port, "/open?url=\((Self.mall + "index.html").localQueryEncoded)")
            let page = try #require(opened.header("Location"), "\(opened.status)")
            #expect(page == server.mirrorURL(for: URL(string: Self.mall + "index.html")!))
            let old = try await view.load(page) as? [String: Any]
            // The page read its version from its own response's Server-Timing, as documented.
            #expect(old?["shipped"] as? String == "1.0.0" && old?["own"] as? String == "1.0.0", "\(String(describing: old))")
            // The snippet confirms on load (bounded: 3000 looks, 0.1 s apart: a hang, not a speed).
            for _ in 0..<3000 {
                if await h.agent().lifecycle(app: "mall").state == .good { break }
                try await Task.sleep(for: .milliseconds(100))
            }
            #expect(await h.agent().lifecycle(app: "mall").state == .good)

            Self.offer(h, offers, app: "mall", version: "1.1.0", whitelist: [Self.mall], files: try Self.confirmingPage("1.1.0"), trialLaunches: 3)
            #expect(await Self.sync(h, "mall").result == .updated)
            #expect(await h.agent().lifecycle(app: "mall").state == .trial)
            // The old page, still open, names the version it rendered: refused, nothing changes.
            for action in ["mark-good", "mark-bad"] {
                let answer = try await view.eval("mark(\"\(action)\");") as? [String: Any]
                #expect(answer?["status"] as? Int == 409, "\(action): \(String(describing: answer))")
                #expect((answer?["body"] as? String)?.contains("version-mismatch") == true, "\(String(describing: answer))")
            }
            var status = await h.agent().lifecycle(app: "mall")
            #expect(status.version?.description == "1.1.0" && status.state == .trial && status.badVersions.isEmpty, "\(status)")

            // The page of 1.1.0 reads 1.1.0 and confirms it.
            #expect(try await LocalHTTP.request(port: server.port, "/open?url=\((Self.mall + "index.html").localQueryEncoded)").status == 302)
            // The host's own /open counted the trial's launch.
            #expect(await h.agent().lifecycle(app: "mall").launches == 1)
            let new = try await view.load(page) as? [String: Any]
            #expect(new?["shipped"] as? String == "1.1.0" && new?["own"] as? String == "1.1.0", "\(String(describing: new))")
            let confirmed = try await view.eval("mark(\"mark-good\");") as? [String: Any]
            #expect(confirmed?["status"] as? Int == 200, "\(String(describing: confirmed))")
            status = await h.agent().lifecycle(app: "mall")
            #expect(status.version?.description == "1.1.0" && status.state == .good, "\(status)")
        }
    }
}
