import Crypto
import Foundation
import Testing
@testable import OfflineAgent
import TestSupport

@Suite("Sync")
struct SyncTests {
    @Test("full install, then a patch update, each served whole")
    func fullThenPatch() async throws {
        let h = try SyncHarness()
        h.origin.setManifest(h.full("1.0.0"))
        let first = await h.sync()
        #expect(first.result == .updated)
        #expect(first.via == .full)
        #expect(first.previousVersion == nil)
        #expect(first.bytesDownloaded == Int64(h.fixture.bytes("1.0.0").count))
        #expect(h.activeMatches("1.0.0"))
        #expect(try await h.served("js/app.js") == h.expected("1.0.0", "js/app.js"))
        #expect(try await h.served("") == h.expected("1.0.0", "index.html"))

        h.origin.setManifest(try h.patch(from: "1.0.0", to: "1.1.0"))
        let second = await h.sync()
        #expect(second.result == .updated, "\(second.error?.description ?? "")")
        #expect(second.via == .patch)
        #expect(second.previousVersion?.description == "1.0.0")
        #expect(second.bytesDownloaded == Int64(try h.fixture.patch(from: "1.0.0", to: "1.1.0").count))
        #expect(second.bytesDownloaded < Int64(h.fixture.bytes("1.1.0").count) / 2)
        #expect(h.activeMatches("1.1.0"))
        // The manifest request carried the installed version.
        #expect(h.origin.requests(for: "/manifest").last?.query["current"] == "1.0.0")
        #expect(h.origin.requests(for: "/manifest").first?.query["current"] == "")
        #expect(h.origin.requests(for: "/manifest").first?.header("User-Agent")?.hasPrefix("offline-agent/") == true)
    }

    @Test("the manifest URL keeps its own query parameters before app and current")
    func keepsQuery() async throws {
        let h = try SyncHarness()
        h.origin.setManifest(h.full("1.0.0"))
        let url = URL(string: h.origin.manifestURL.absoluteString + "?channel=beta")!
        _ = await h.agent().sync(app: "mall", manifest: url, options: SyncOptions(force: true))
        #expect(h.origin.requests.first?.target.hasPrefix("/manifest?channel=beta&app=mall&current=") == true)
    }

    @Test("throttle: one check per 5 minutes across agents, force skips it")
    func throttle() async throws {
        let h = try SyncHarness()
        h.origin.setManifest(h.full("1.0.0"))
        #expect(await h.sync(force: false).result == .updated)
        let again = await h.sync(force: false)
        #expect(again.result == .throttled)
        #expect(again.version?.description == "1.0.0")
        #expect(again.previousVersion?.description == "1.0.0")
        #expect(h.origin.requests(for: "/manifest").count == 1)
        #expect(await h.sync(force: true).result == .upToDate)
        #expect(h.origin.requests(for: "/manifest").count == 2)
    }

    @Test("a failed sync reports the installed version before and after, whether it failed before the throttle or at the server")
    func failedReportsVersions() async throws {
        let h = try SyncHarness()
        h.origin.setManifestReply { _ in .status(500) }
        let nothingYet = await h.sync()
        #expect(nothingYet.result == .failed)
        #expect(nothingYet.version == nil && nothingYet.previousVersion == nil)
        h.origin.setManifest(h.full("1.0.0"))
        #expect(await h.sync().result == .updated)
        let badKey = await h.sync(publicKey: "not base64")
        #expect(badKey.result == .failed)
        #expect(badKey.version?.description == "1.0.0")
        #expect(badKey.previousVersion?.description == "1.0.0")
        h.origin.setManifestReply { _ in .status(500) }
        let serverError = await h.sync()
        #expect(serverError.result == .failed)
        #expect(serverError.version?.description == "1.0.0")
        #expect(serverError.previousVersion?.description == "1.0.0")
    }

    @Test("Retry-After is persisted, capped at 24 h; a forced sync asks again")
    func retryAfter() async throws {
        let h = try SyncHarness()
        h.origin.setManifestReply { _ in .status(503, headers: [("Retry-After", "999999")]) }
        // Bracketed by the clock before and after the sync (a second either side for
        // whole-second storage): exact however long a loaded machine takes.
        let before = Date()
        let report = await h.sync()
        let after = Date()
        #expect(report.result == .throttled)
        let next = try #require(report.nextCheck)
        #expect(next >= before.addingTimeInterval(86_400 - 1), "\(next)")
        #expect(next <= after.addingTimeInterval(86_400 + 1), "\(next)")
        #expect(await h.sync(force: false).result == .throttled)
        #expect(h.origin.requests(for: "/manifest").count == 1)
        #expect(await h.sync(force: true).result == .throttled)
        #expect(h.origin.requests(for: "/manifest").count == 2)
    }

    @Test("Retry-After as an HTTP date on 429")
    func retryAfterDate() async throws {
        let h = try SyncHarness()
        // A fixed clock: the answer is exact, however long a loaded machine takes.
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        h.configuration.clock = { now }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        let when = formatter.string(from: now.addingTimeInterval(3600))
        h.origin.setManifestReply { _ in .status(429, headers: [("Retry-After", when)]) }
        let report = await h.sync()
        #expect(report.result == .throttled)
        #expect(report.nextCheck == now.addingTimeInterval(3600))
    }

    @Test("ETag: If-None-Match is sent and 304 means up-to-date")
    func etag() async throws {
        let h = try SyncHarness()
        let body = try JSONSerialization.data(withJSONObject: h.full("1.0.0"))
        h.origin.setManifestReply { request in
            request.header("If-None-Match") == "\"m1\"" ? .status(304) : .ok([UInt8](body), headers: [("ETag", "\"m1\"")])
        }
        #expect(await h.sync().result == .updated)
        #expect(await h.sync().result == .upToDate)
        #expect(h.origin.requests(for: "/manifest").last?.header("If-None-Match") == "\"m1\"")
        #expect(h.origin.requests(for: "/files/1.0.0.zip").count == 1)
    }

    @Test("a manifest for the installed version updates rollout and whitelist")
    func sameVersionPolicy() async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        h.origin.setManifest(h.full("1.0.0", ["rollout": 0, "whitelist": ["https://h5.example.com/other/"]]))
        #expect(await h.sync().result == .upToDate)
        #expect(h.store.active("mall")?.rollout == 0)
        #expect(h.store.active("mall")?.whitelist == ["https://h5.example.com/other/"])
    }

    struct Rejection: CustomTestStringConvertible, Sendable {
        var label: String
        var reason: String
        var cause: OfflineAgentError.Cause = .manifestInvalid
        var body: @Sendable (SyncHarness) throws -> [UInt8]
        var testDescription: String { label }
    }

    static func json(_ object: [String: Any]) -> [UInt8] {
        [UInt8](try! JSONSerialization.data(withJSONObject: object))
    }

    static let rejections: [Rejection] = [
        Rejection(label: "invalid version", reason: "version must be dotted decimal numbers") { json($0.full("1.1.0", ["version": "1.1.x"])) },
        Rejection(label: "version with a sign", reason: "version must be dotted decimal numbers") { json($0.full("1.1.0", ["version": "+1.1"])) },
        Rejection(label: "too many components", reason: "version must be dotted decimal numbers") { json($0.full("1.1.0", ["version": "1.1.0.0.0.0.0.0.0"])) },
        Rejection(label: "missing field", reason: "missing field 'packageSha256'") {
            var object = $0.full("1.1.0")
            object.removeValue(forKey: "packageSha256")
            return json(object)
        },
        Rejection(label: "miniVersion above version", reason: "miniVersion") { json($0.full("1.1.0", ["miniVersion": "2.0"])) },
        Rejection(label: "expired", reason: "expired", cause: .expired) { json($0.full("1.1.0", ["expires": "2020-01-01T00:00:00Z"])) },
        Rejection(label: "downgrade", reason: "downgrade", cause: .downgrade) { json($0.full("1.1.0", ["version": "0.9.0", "miniVersion": "0.9.0"])) },
        Rejection(label: "other app", reason: "not 'mall'", cause: .wrongApp) { json($0.full("1.1.0", ["app": "shop"])) },
        Rejection(label: "same version, other package", reason: "different package") {
            json($0.full("1.0.0", ["packageSha256": String(repeating: "a", count: 64), "sha256": String(repeating: "a", count: 64)]))
        },
        Rejection(label: "invalid JSON", reason: "invalid") { _ in Array("{\"app\": \"mall\", ".utf8) },
        Rejection(label: "oversize manifest", reason: "exceeds", cause: .tooLarge) {
            json($0.full("1.1.0", ["padding": String(repeating: "x", count: 1 << 20)]))
        },
        Rejection(label: "bad sha256", reason: "sha256") { json($0.full("1.1.0", ["sha256": "XYZ"])) },
        Rejection(label: "rollout out of range", reason: "rollout") { json($0.full("1.1.0", ["rollout": 101])) },
        Rejection(label: "size above the cap", reason: "exceeds the cap", cause: .tooLarge) { json($0.full("1.1.0", ["size": 2 << 30])) },
    ]

    @Test("bad manifests are rejected before any download", arguments: rejections)
    func rejects(_ rejection: Rejection) async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        h.origin.setManifest(raw: try rejection.body(h))
        let report = await h.sync()
        #expect(report.result == .failed)
        #expect(report.error?.reason.contains(rejection.reason) == true, "reason: \(report.error?.description ?? "none")")
        #expect(report.error?.cause == rejection.cause, "cause: \(report.error?.description ?? "none")")
        #expect(h.origin.requests.filter { $0.path.hasPrefix("/files/") }.count == 1, "only the setup download")
        #expect(h.activeMatches("1.0.0"))
    }

    @Test("server errors fail the check and change nothing")
    func serverError() async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        h.origin.setManifestReply { _ in .status(500) }
        let report = await h.sync()
        #expect(report.result == .failed)
        #expect(report.error?.code == .manifest)
        #expect(h.activeMatches("1.0.0"))
    }

    @Test("wifi-only updates are deferred on a metered network")
    func deferred() async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        h.origin.setManifest(h.full("1.1.0", ["networkType": "wifi"]))
        let report = await h.sync(network: .metered)
        #expect(report.result == .deferred)
        #expect(h.origin.requests(for: "/files/1.1.0.zip").isEmpty)
        #expect(await h.sync(network: .unmetered).result == .updated)
    }

    @Test("a record that disagrees with the disk is repaired by a full install", arguments: ["version dir gone", "record gone", "link dangling"])
    func repair(_ damage: String) async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        let v = Version("1.0.0")!
        switch damage {
        case "version dir gone": try FileManager.default.removeItem(atPath: h.store.versionDirectory("mall", v))
        case "record gone": try FileManager.default.removeItem(atPath: h.store.metadataPath("mall", v))
        default:
            try FileManager.default.removeItem(atPath: h.store.currentLink("mall"))
            try FileManager.default.createSymbolicLink(atPath: h.store.currentLink("mall"), withDestinationPath: "versions/9.9.9")
        }
        #expect(h.store.isInconsistent("mall"))
        h.origin.setManifest(try h.patch(from: "1.0.0", to: "1.1.0"))
        let report = await h.sync()
        #expect(report.result == .updated, "\(report.error?.description ?? "")")
        #expect(report.via == .full)
        #expect(h.origin.requests(for: "/manifest").last?.query["current"] == "")
        #expect(h.activeMatches("1.1.0"))
    }

    @Test("gzip-compressed full packages are decoded and verified")
    func gzipFull() async throws {
        let h = try SyncHarness()
        let gz = try PackageFixture.gzip(h.fixture.bytes("1.2.0"))
        h.origin.put("1.2.0.zip.gz", gz)
        h.origin.setManifest(h.full("1.2.0", [
            "url": "files/1.2.0.zip.gz", "size": gz.count, "sha256": PackageFixture.sha256(gz), "compression": "gzip",
        ]))
        let report = await h.sync()
        #expect(report.result == .updated, "\(report.error?.description ?? "")")
        #expect(report.bytesDownloaded == Int64(gz.count))
        #expect(h.activeMatches("1.2.0"))
    }

    @Test("a gzip fallback without fullSha256 is checked by packageSha256 after decoding")
    func gzipFallbackWithoutHash() async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        try offerGzipFallback(h, from: "1.0.0", to: "1.1.0", serving: "1.1.0")
        let report = await h.sync()
        #expect(report.result == .updated, "\(report.error?.description ?? "")")
        #expect(report.via == .full)
        #expect(h.activeMatches("1.1.0"))

        // The same without a hash but with the wrong bytes behind it: refused after decoding.
        try offerGzipFallback(h, from: "1.1.0", to: "1.2.0", serving: "1.3.0")
        let refused = await h.sync()
        #expect(refused.result == .failed)
        #expect(refused.error?.reason.contains("decompressed package hashes") == true, "\(refused.error?.description ?? "")")
        #expect(h.activeMatches("1.1.0"))
    }

    /// A patch manifest whose patch is missing and whose gzip full package (the bytes of
    /// `serving`) comes without `fullSha256`, so only packageSha256 can check it.
    private func offerGzipFallback(_ h: SyncHarness, from base: String, to version: String, serving: String) throws {
        let gz = try PackageFixture.gzip(h.fixture.bytes(serving))
        h.origin.put("\(version).zip.gz", gz)
        var manifest = try h.patch(from: base, to: version, ["compression": "gzip", "fullUrl": "files/\(version).zip.gz", "fullSize": gz.count])
        manifest.removeValue(forKey: "fullSha256")
        manifest["url"] = "files/missing.bsdiff"
        h.origin.setManifest(manifest)
    }

    @Test("gzip that decodes to the wrong package is refused")
    func gzipWrongPackage() async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        let gz = try PackageFixture.gzip(h.fixture.bytes("1.1.0"))
        h.origin.put("x.gz", gz)
        h.origin.setManifest(h.full("1.2.0", [
            "url": "files/x.gz", "size": gz.count, "sha256": PackageFixture.sha256(gz), "compression": "gzip",
        ]))
        let report = await h.sync()
        #expect(report.result == .failed)
        #expect(report.error?.reason.contains("packageSha256") == true || report.error?.reason.contains("hashes") == true)
        #expect(h.activeMatches("1.0.0"))
    }
}

@Suite("Signatures")
struct SignatureTests {
    let key = Curve25519.Signing.PrivateKey()
    var publicKey: String { key.publicKey.rawRepresentation.base64EncodedString() }

    func signed(_ h: SyncHarness, _ object: [String: Any], tamper: Bool = false) throws {
        var body = [UInt8](try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]))
        let signature = try key.signature(for: body).base64EncodedString()
        if tamper { body[body.count / 2] ^= 0x01 }
        h.origin.setManifest(raw: body, headers: [("X-Offline-Signature", signature)])
    }

    @Test("a valid header signature is accepted")
    func headerSignature() async throws {
        let h = try SyncHarness()
        try signed(h, h.full("1.0.0"))
        let report = await h.sync(publicKey: publicKey)
        #expect(report.result == .updated, "\(report.error?.description ?? "")")
    }

    @Test("a detached .sig file is used when the header is absent")
    func detachedSignature() async throws {
        let h = try SyncHarness()
        var manifest = h.full("1.0.0")
        manifest["url"] = h.origin.fileURL("1.0.0.zip")
        let absolute = [UInt8](try JSONSerialization.data(withJSONObject: manifest))
        let absoluteSignature = try key.signature(for: absolute).base64EncodedString()
        let server = try ScriptedServer { request in
            switch request.path {
            case "/m/manifest": .ok(absolute)
            case "/m/manifest.sig": .ok(Array(absoluteSignature.utf8))
            default: .status(404)
            }
        }
        let report = await h.agent().sync(
            app: "mall", manifest: URL(string: "\(server.baseURL)/m/manifest")!, options: SyncOptions(force: true, publicKey: publicKey))
        #expect(report.result == .updated, "\(report.error?.description ?? "")")
        #expect(server.requests.map(\.path) == ["/m/manifest", "/m/manifest.sig"])
    }

    @Test("unsigned, badly signed and tampered manifests are rejected before any download", arguments: ["unsigned", "wrong key", "tampered", "garbage"])
    func rejected(_ kind: String) async throws {
        let h = try SyncHarness()
        switch kind {
        case "unsigned":
            h.origin.setManifest(h.full("1.0.0"))
        case "wrong key":
            let other = Curve25519.Signing.PrivateKey()
            let body = [UInt8](try JSONSerialization.data(withJSONObject: h.full("1.0.0")))
            h.origin.setManifest(raw: body, headers: [("X-Offline-Signature", try other.signature(for: body).base64EncodedString())])
        case "tampered":
            try signed(h, h.full("1.0.0"), tamper: true)
        default:
            h.origin.setManifest(raw: SyncTests.json(h.full("1.0.0")), headers: [("X-Offline-Signature", "not base64!")])
        }
        let report = await h.sync(publicKey: publicKey)
        #expect(report.result == .failed)
        #expect(report.error?.code == .manifest)
        #expect(report.error?.reason.contains("signature") == true, "\(report.error?.description ?? "")")
        #expect(h.origin.requests.filter { $0.path.hasPrefix("/files/") }.isEmpty)
        #expect(h.active == nil)
    }
}
