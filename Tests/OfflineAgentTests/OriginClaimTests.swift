import Foundation
import Testing
@testable import OfflineAgent
import TestSupport

/// Issue 39, row 1: an app claims only the origins its device config allows, and never an
/// origin another installed app holds, whatever the paths (`docs/PROTOCOL.md`, "Who claims
/// an origin"). Written as the hostile publisher of a second app would try it.
@Suite("Origin claims")
struct OriginClaimTests {
    /// Serves, per `app` query parameter, the full manifest `manifests[app]` (404 for others).
    private func serveManifests(_ h: SyncHarness, _ manifests: [String: [String: Any]]) {
        let bodies = manifests.mapValues { try! JSONSerialization.data(withJSONObject: $0, options: [.sortedKeys]) }
        h.origin.setManifestReply { request in
            guard let app = request.query["app"], let body = bodies[app] else { return .status(404) }
            return .ok([UInt8](body))
        }
    }

    /// `mall` (h5.example.com/mall/) and `shop` (h5.example.com/shop/) offered on one origin.
    private func twoAppsOnOneOrigin() throws -> SyncHarness {
        let h = try SyncHarness()
        var shop = h.full("1.0.0", ["whitelist": ["https://h5.example.com/shop/"]])
        shop["app"] = "shop"
        serveManifests(h, ["mall": h.full("1.0.0"), "shop": shop])
        return h
    }

    private func sync(_ h: SyncHarness, _ app: String, allowed: [String]? = nil) async -> SyncReport {
        var options = SyncOptions(force: true)
        options.allowedOrigins = allowed
        return await h.agent().sync(app: app, manifest: h.origin.manifestURL, options: options)
    }

    @Test("another app's whitelist on an installed app's origin is refused, whatever the paths, and the installed app keeps serving",
          arguments: [
              ["https://h5.example.com/evil-corp/", "https://h5.example.com/mall/login/"],
              ["https://h5.example.com/evil-corp/"],
              ["https://H5.EXAMPLE.com.:443/elsewhere/"],
          ])
    func otherAppsOrigin(_ whitelist: [String]) async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        var evil = h.full("1.0.0", ["app": "evil", "whitelist": whitelist])
        evil["app"] = "evil"
        serveManifests(h, ["evil": evil])
        let downloads = h.origin.requests(for: "/files/1.0.0.zip").count
        let report = await sync(h, "evil")
        #expect(report.result == .failed)
        #expect(report.error?.cause == .originClaimed, "\(report.error?.description ?? "")")
        #expect(report.error?.reason.contains("'mall'") == true)
        #expect(h.store.active("evil") == nil)
        // Refused before any byte of the package was asked for.
        #expect(h.origin.requests(for: "/files/1.0.0.zip").count == downloads)
        // Bank's URLs still resolve to bank's own files, never evil's.
        let resolved = try await h.agent().resolve(URL(string: "https://h5.example.com/mall/index.html")!, deviceID: "device")
        if case .file(let file) = resolved { #expect(file.app == "mall") } else { Issue.record("\(resolved)") }
        #expect(try await h.served("") == h.expected("1.0.0", "index.html"))
    }

    @Test("the first app to install keeps its origin: a second app claiming it on its first install is refused, in either order")
    func firstComeFirstServed() async throws {
        let h = try twoAppsOnOneOrigin()
        #expect(await sync(h, "shop").result == .updated)
        let report = await sync(h, "mall")
        #expect(report.error?.cause == .originClaimed)
        #expect(h.store.active("mall") == nil)
        #expect(h.store.active("shop") != nil)
    }

    @Test("two apps of one batch claiming one origin: exactly one installs")
    func batch() async throws {
        let h = try twoAppsOnOneOrigin()
        let reports = await h.agent().sync([
            SyncRequest(app: "mall", manifest: h.origin.manifestURL, options: SyncOptions(force: true)),
            SyncRequest(app: "shop", manifest: h.origin.manifestURL, options: SyncOptions(force: true)),
        ])
        #expect(reports.filter { $0.result == .updated }.count == 1)
        #expect(reports.filter { $0.error?.cause == .originClaimed }.count == 1)
    }

    @Test("an update that adds an origin the device does not allow is refused and the installed version keeps serving; allowedOrigins admits it")
    func newOrigin() async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        let widened = h.full("1.1.0", ["whitelist": [SyncHarness.whitelist, "http://intranet.corp:8080/"]])
        serveManifests(h, ["mall": widened])
        let refused = await sync(h, "mall")
        #expect(refused.error?.cause == .originNotAllowed, "\(refused.error?.description ?? "")")
        #expect(refused.error?.reason.contains("http://intranet.corp:8080") == true)
        #expect(refused.error?.reason.contains("allowedOrigins") == true)
        #expect(h.active?.description == "1.0.0")
        #expect(try await h.served("") == h.expected("1.0.0", "index.html"))
        // The same version re-published with a wider whitelist is refused the same way.
        serveManifests(h, ["mall": h.full("1.0.0", ["whitelist": ["https://intranet.corp/"]])])
        #expect(await sync(h, "mall").error?.cause == .originNotAllowed)
        #expect(h.store.active("mall")?.whitelist == [SyncHarness.whitelist])
        // The operator allows it: the update installs.
        serveManifests(h, ["mall": widened])
        let allowed = await sync(h, "mall", allowed: ["https://h5.example.com", "http://intranet.corp:8080/"])
        #expect(allowed.result == .updated, "\(allowed.error?.description ?? "")")
    }

    @Test("a first install outside the configured allowedOrigins is refused")
    func configuredList() async throws {
        let h = try SyncHarness()
        serveManifests(h, ["mall": h.full("1.0.0")])
        let report = await sync(h, "mall", allowed: ["https://other.example.com"])
        #expect(report.error?.cause == .originNotAllowed)
        #expect(h.active == nil)
        #expect(await sync(h, "mall", allowed: ["https://h5.example.com:443"]).result == .updated)
    }

    @Test("a root from before the rule, with two apps on one origin: neither answers for it, through resolve or serve's mirror list")
    func legacyShared() throws {
        let f = ResolverTests.Fixture()
        try f.add("portal", version: "2.0", whitelist: ["https://h5.example.com/"], files: ["index.html": "portal", "mall/index.html": "portal-mall"])
        try f.add("mall", version: "1.0", whitelist: ["https://h5.example.com/mall/"])
        try f.add("docs", version: "1.0", whitelist: ["https://docs.example.com/"])
        #expect(f.resolve("https://h5.example.com/mall/index.html") == .network(.notWhitelisted, app: nil))
        #expect(f.resolve("https://h5.example.com/index.html") == .network(.notWhitelisted, app: nil))
        #expect(f.path("https://docs.example.com/index.html") != nil)
    }
}
