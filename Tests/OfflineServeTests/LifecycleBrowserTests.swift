import Foundation
import OfflineServe
import Testing
@testable import OfflineAgent
import TestSupport

/// Headless Chromium in front of `LocalServer`: a release whose page throws before it
/// confirms itself is rolled back after `maxTrialLaunches` opens and never reinstalled;
/// a release whose page confirms (the README's two-line snippet) stays.
@Suite("Lifecycle browser", .serialized)
struct LifecycleBrowserTests {
    static let whitelist = BrowserTests.whitelist

    /// A one-page package whose script shows its version, and then either confirms
    /// itself or throws first (a release that installs fine but does not work).
    static func package(_ version: String, confirms: Bool) -> [UInt8] {
        // docs/HOST-APPS.md's snippet: the version of this very document, from its own
        // response (Server-Timing), confirmed from the page's mirror origin.
        let confirm = """
            const nav = performance.getEntriesByType("navigation")[0];
            const own = nav && nav.serverTiming.find((e) => e.name === "offline-agent-version");
            document.getElementById("served").textContent = own ? own.description : "unknown";
            addEventListener("load", () => fetch("/.offline-agent/mark-good?app=mall&version=" + encodeURIComponent(own ? own.description : ""), {method: "POST"})
              .then((r) => { document.getElementById("confirmed").textContent = String(r.status); }).catch(() => {}));
            """
        let html = """
            <!DOCTYPE html>
            <html><head><meta charset="utf-8"><title>mall \(version)</title></head>
            <body><p>version <span id="version">\(version)</span>, served as <span id="served">none</span>, confirmed <span id="confirmed">no</span></p>
            <script>
            \(confirms ? "" : "throw new Error(\"render failed\");")
            \(confirm)
            </script></body></html>
            """
        var zip = ZipBuilder()
        zip.file("index.html", html)
        return zip.build()
    }

    static func offer(_ h: SyncHarness, _ version: String, confirms: Bool) {
        let bytes = package(version, confirms: confirms)
        let sha = PackageFixture.sha256(bytes)
        h.origin.put("page-\(version).zip", bytes)
        h.origin.setManifest([
            "app": "mall", "version": version, "miniVersion": "1.0.0", "isPatch": false,
            "url": "files/page-\(version).zip", "size": bytes.count, "sha256": sha, "packageSha256": sha,
            "whitelist": [whitelist], "rollout": 100,
        ])
    }

    /// The version the page shows, and whether its confirmation answered 200.
    static func load(_ server: RunningLocalServer) async throws -> (version: String?, confirmed: Bool) {
        let dom = try await BrowserTests.dumpDOM(BrowserTests.openURL(server, ""))
        let version = dom.range(of: "<span id=\"version\">").flatMap { start in
            dom[start.upperBound...].range(of: "</span>").map { String(dom[start.upperBound..<$0.lowerBound]) }
        }
        // A page that ran read its own version from its response (what it confirms with).
        if let version, !dom.contains("<span id=\"served\">none</span>") { #expect(dom.contains("<span id=\"served\">\(version)</span>"), "\(dom)") }
        return (version, dom.contains("<span id=\"confirmed\">200</span>"))
    }

    @Test(
        "a page that throws before confirming is rolled back after maxTrialLaunches opens; one that confirms stays",
        .enabled(if: BrowserTests.chromium != nil, "chromium is not installed (apt-get install -y chromium)"))
    func trialInTheBrowser() async throws {
        let h = try SyncHarness()
        Self.offer(h, "1.0.0", confirms: true)
        #expect(await h.sync().result == .updated)
        let server = try await LocalServer(configuration: .init(root: h.root.path, port: 0, deviceID: "browser", maxTrialLaunches: 2)).start()
        do {
            // The confirming release: confirmed on its first open, and it stays.
            let first = try await Self.load(server)
            #expect(first.version == "1.0.0" && first.confirmed)
            #expect(await h.agent().lifecycle(app: "mall").state == .good)

            // The broken release: shown (from the package) on its trial launches, never confirmed.
            Self.offer(h, "2.0.0", confirms: false)
            #expect(await h.sync().result == .updated)
            for _ in 1...2 {
                let broken = try await Self.load(server)
                #expect(broken.version == "2.0.0" && !broken.confirmed)
            }
            #expect(await h.agent().lifecycle(app: "mall").launches == 2)
            // Out of launches: the next open rolls back before answering.
            let rolledBack = try await Self.load(server)
            #expect(rolledBack.version == "1.0.0" && rolledBack.confirmed)
            let status = await h.agent().lifecycle(app: "mall")
            #expect(status.version?.description == "1.0.0" && status.state == .good)
            #expect(status.badVersions.map(\.version.description) == ["2.0.0"])
            #expect(status.history.last?.event == .automaticRollback)

            // The next sync does not reinstall it.
            let again = await h.sync()
            #expect(again.result == .knownBad)
            #expect(h.origin.requests(for: "/files/page-2.0.0.zip").count == 1)
            #expect(try await Self.load(server).version == "1.0.0")

            // A fixed release confirms itself and stays, however often it is opened.
            Self.offer(h, "2.0.1", confirms: true)
            #expect(await h.sync().result == .updated)
            for _ in 1...3 {
                let fixed = try await Self.load(server)
                #expect(fixed.version == "2.0.1" && fixed.confirmed)
            }
            #expect(await h.agent().lifecycle(app: "mall").state == .good)
            #expect(h.store.active("mall")?.version.description == "2.0.1")
        } catch {
            await server.stop()
            throw error
        }
        await server.stop()
    }
}
