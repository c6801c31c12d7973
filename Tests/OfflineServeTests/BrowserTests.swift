import Foundation
import OfflineServe
import Testing
@testable import OfflineAgent
import TestSupport

/// A real browser in front of `LocalServer`: headless Chromium opens a whitelisted
/// URL whose origin does not exist (`.invalid`), through `/open`, and must run the
/// package's JavaScript from the local copy.
@Suite("Browser", .serialized)
struct BrowserTests {
    static let chromium: String? = ["/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"]
        .first { FileManager.default.isExecutableFile(atPath: $0) }
    static let whitelist = "https://h5.example.invalid/mall/"

    /// Chromium's DOM after the page's scripts ran; bounded by `timeout`.
    static func dumpDOM(_ url: String, flags: [String] = []) async throws -> String {
        let chromium = try #require(chromium)
        let profile = TemporaryDirectory("chromium")
        let result = try await run("/usr/bin/timeout", [
            "300", chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--no-default-browser-check", "--user-data-dir=\(profile.path)",
        ] + flags + ["--virtual-time-budget=5000", "--dump-dom", url])
        #expect(result.status == 0, "chromium: \(result.stderr.suffix(2000))")
        return result.stdout
    }

    static func openURL(_ server: RunningLocalServer, _ page: String) -> String {
        "\(server.baseURL)/open?url=\((whitelist + page).localQueryEncoded)"
    }

    @Test(
        "headless Chromium loads the package through /open and runs its JS, offline",
        .enabled(if: BrowserTests.chromium != nil, "chromium is not installed (apt-get install -y chromium)"))
    func loadsPackage() async throws {
        let h = try SyncHarness()
        h.origin.setManifest(h.full("1.0.0", ["whitelist": [Self.whitelist]]))
        let installed = await h.sync()
        #expect(installed.result == .updated)
        let server = try await LocalServer(configuration: .init(root: h.root.path, port: 0, deviceID: "browser")).start()
        do {
            let dom = try await Self.dumpDOM(Self.openURL(server, "index.html?from=test"))
            #expect(dom.contains("<span id=\"version\">1.0.0</span>"), "\(dom.prefix(3000))")
            #expect(dom.contains("data-app-version=\"1.0.0\""))
            // The product list is rendered by the package's JS (the CSS and logo loaded from /mall/ too).
            #expect(dom.contains("class=\"card\""))
            #expect(!dom.contains("<span id=\"version\">loading</span>"))

            // A nested page with relative ../ references.
            let about = try await Self.dumpDOM(Self.openURL(server, "pages/about.html"))
            #expect(about.contains("<span id=\"version\">1.0.0</span>"), "\(about.prefix(3000))")

            // A new version is picked up by the next load.
            h.origin.setManifest(h.full("1.2.0", ["whitelist": [Self.whitelist]]))
            let updated = await h.sync()
            #expect(updated.result == .updated)
            let next = try await Self.dumpDOM(Self.openURL(server, ""))
            #expect(next.contains("<span id=\"version\">1.2.0</span>"), "\(next.prefix(3000))")

            // Three /open hits, then each page and what it loads from the package on the
            // mirror host /open redirected to: at least one more hit per page load.
            #expect(server.metrics.offlineHits(app: "mall") >= 3 + 3)
            #expect(server.metrics.fileResponses(app: "mall", code: 404) == 0)
            for reason in FallbackReason.allCases {
                #expect(server.metrics.networkFallbacks(app: "mall", reason: reason) == 0)
            }
        } catch {
            await server.stop()
            throw error
        }
        await server.stop()
    }
}
