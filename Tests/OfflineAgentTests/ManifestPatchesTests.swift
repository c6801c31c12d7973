import Foundation
import Testing
@testable import OfflineAgent
import TestSupport

/// The manifest's `patches` list (a static manifest's deltas from several recent
/// versions): read as strictly as the top level, and the agent takes the entry for
/// its installed version, falling back to the full package exactly as for `isPatch`.
@Suite("Manifest patches")
struct ManifestPatchesTests {
    static let hash = String(repeating: "a", count: 64)
    static let other = String(repeating: "b", count: 64)

    static func entry(_ base: String, url: String = "files/p.bsdiff", size: String = "10", sha256: String = hash) -> String {
        "{\"baseVersion\":\"\(base)\",\"url\":\"\(url)\",\"size\":\(size),\"sha256\":\"\(sha256)\"}"
    }

    /// A full-package manifest for 1.3.0 with `patches` set to the raw JSON given.
    static func body(patches: String, top: String = "\"isPatch\":false,\"url\":\"files/1.3.0.zip\",\"size\":100,\"sha256\":\"\(hash)\"") -> Data {
        Data("""
            {"app":"mall","version":"1.3.0","miniVersion":"1.0.0",\(top),"packageSha256":"\(hash)",\
            "whitelist":[],"patches":\(patches)}
            """.utf8)
    }

    @Test("a list of patches decodes, absent and null mean none, and it round-trips through Codable")
    func decodes() throws {
        let manifest = try Manifest.decode(Self.body(patches: "[\(Self.entry("1.2.0")),\(Self.entry("1.1", url: "https://cdn.example.com/x.bsdiff"))]"))
        #expect(manifest.patches == [
            ManifestPatch(baseVersion: Version("1.2.0")!, url: "files/p.bsdiff", size: 10, sha256: Self.hash),
            ManifestPatch(baseVersion: Version("1.1")!, url: "https://cdn.example.com/x.bsdiff", size: 10, sha256: Self.hash),
        ])
        #expect(manifest.patch(from: Version("1.1.0"))?.url == "https://cdn.example.com/x.bsdiff")
        #expect(manifest.patch(from: Version("1.0.0")) == nil)
        #expect(manifest.patch(from: nil) == nil)
        #expect(try Manifest.decode(Self.body(patches: "null")).patches.isEmpty)
        #expect(try Manifest.decode(Self.body(patches: "[]")).patches.isEmpty)
        let again = try JSONDecoder().decode(Manifest.self, from: JSONEncoder().encode(manifest))
        #expect(again == manifest)
        // No list, no key: bodies of manifests without patches do not change.
        var plain = manifest
        plain.patches = []
        #expect(!String(decoding: try JSONEncoder().encode(plain), as: UTF8.self).contains("patches"))
    }

    struct Refusal: CustomTestStringConvertible, Sendable {
        var label: String
        var patches: String
        var reason: String
        var top: String? = nil
        var testDescription: String { label }
    }

    static let refusals: [Refusal] = [
        Refusal(label: "not an array", patches: "{}", reason: ManifestFields.rule("patches")),
        Refusal(label: "an entry not an object", patches: "[\"1.2.0\"]", reason: ManifestFields.rule("patches")),
        Refusal(label: "invalid baseVersion", patches: "[\(entry("1.x"))]",
                reason: "patches[0]: " + ManifestFields.rule("baseVersion")),
        Refusal(label: "missing sha256", patches: "[{\"baseVersion\":\"1.2.0\",\"url\":\"a\",\"size\":1}]",
                reason: "patches[0]: missing field 'sha256'"),
        Refusal(label: "negative size", patches: "[\(entry("1.2.0")),\(entry("1.1.0", size: "-1"))]",
                reason: "patches[1]: " + ManifestFields.rule("size")),
        Refusal(label: "fractional size", patches: "[\(entry("1.2.0", size: "10.0"))]",
                reason: "patches[0]: " + ManifestFields.rule("size")),
        Refusal(label: "size past Int64", patches: "[\(entry("1.2.0", size: "9223372036854775808"))]",
                reason: "patches[0]: " + ManifestFields.rule("size")),
        Refusal(label: "uppercase sha256", patches: "[\(entry("1.2.0", sha256: hash.uppercased()))]",
                reason: "patches[0]: " + ManifestFields.rule("sha256")),
        Refusal(label: "a file: URL", patches: "[\(entry("1.2.0", url: "file:///etc/passwd"))]",
                reason: "patches[0]: " + ManifestFields.rule("url")),
        Refusal(label: "base not below version", patches: "[\(entry("1.3"))]",
                reason: "patches[0]: baseVersion 1.3 is not below version 1.3.0"),
        Refusal(label: "the same base twice, spelled differently", patches: "[\(entry("1.2.0")),\(entry("1.2"))]",
                reason: "patches[1]: baseVersion 1.2 is listed twice"),
        Refusal(label: "too many entries", patches: "[" + (0...ManifestPatch.maxCount).map { entry("1.0.\($0)") }.joined(separator: ",") + "]",
                reason: ManifestFields.rule("patches")),
        Refusal(label: "an entry contradicting the top-level patch",
                patches: "[\(entry("1.2.0", sha256: other))]",
                reason: "patches[0]: the patch from 1.2.0 differs from the top-level one",
                top: "\"isPatch\":true,\"baseVersion\":\"1.2.0\",\"url\":\"p\",\"size\":10,\"sha256\":\"\(hash)\",\"fullUrl\":\"f\",\"fullSize\":100"),
    ]

    @Test("a malformed list refuses the manifest whole, naming the entry and its rule", arguments: refusals)
    func refuses(_ refusal: Refusal) throws {
        let body = refusal.top.map { Self.body(patches: refusal.patches, top: $0) } ?? Self.body(patches: refusal.patches)
        let error = try #require(throws: OfflineAgentError.self) { try Manifest.decode(body) }
        #expect(error.cause == .manifestInvalid)
        #expect(error.reason == refusal.reason)
    }

    @Test("an entry repeating the top-level patch is accepted (a server choosing for the client and listing too)")
    func agreeingTopLevel() throws {
        let top = "\"isPatch\":true,\"baseVersion\":\"1.2.0\",\"url\":\"p\",\"size\":10,\"sha256\":\"\(Self.hash)\",\"fullUrl\":\"f\",\"fullSize\":100"
        let manifest = try Manifest.decode(Self.body(patches: "[\(Self.entry("1.2.0")),\(Self.entry("1.1.0"))]", top: top))
        #expect(manifest.patch(from: Version("1.2.0"))?.url == "p")
        #expect(manifest.patch(from: Version("1.1.0"))?.url == "files/p.bsdiff")
    }

    // MARK: The agent

    /// A full-package manifest of `version` listing reference-bsdiff patches from `bases`.
    static func listing(_ h: SyncHarness, _ version: String, from bases: [String]) throws -> [String: Any] {
        let patches = try bases.map { base -> [String: Any] in
            let patch = try h.fixture.patch(from: base, to: version)
            h.origin.put("\(base)-\(version).bsdiff", patch)
            return ["baseVersion": base, "url": "files/\(base)-\(version).bsdiff", "size": patch.count, "sha256": PackageFixture.sha256(patch)]
        }
        return h.full(version, ["patches": patches])
    }

    @Test("the installed version's entry is downloaded instead of the full package, and the result installs byte for byte")
    func takesItsPatch() async throws {
        let h = try SyncHarness()
        try await h.install("1.1.0")
        h.origin.setManifest(try Self.listing(h, "1.3.0", from: ["1.0.0", "1.1.0", "1.2.0"]))
        let report = await h.sync()
        #expect(report.result == .updated, "\(report.error?.description ?? "")")
        #expect(report.via == .patch)
        #expect(report.patchFallbackReason == nil)
        #expect(report.bytesDownloaded == Int64(try h.fixture.patch(from: "1.1.0", to: "1.3.0").count))
        #expect(h.origin.requests(for: "/files/1.1.0-1.3.0.bsdiff").count == 1)
        #expect(h.origin.requests(for: "/files/1.3.0.zip").isEmpty)
        #expect(h.activeMatches("1.3.0"))
    }

    @Test("a device whose version is not listed, or with nothing installed, downloads the full package")
    func notListed() async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        h.origin.setManifest(try Self.listing(h, "1.3.0", from: ["1.1.0", "1.2.0"]))
        let report = await h.sync()
        #expect(report.result == .updated, "\(report.error?.description ?? "")")
        #expect(report.via == .full)
        #expect(report.patchFallbackReason == nil)
        #expect(h.origin.requests(for: "/files/1.1.0-1.3.0.bsdiff").isEmpty && h.origin.requests(for: "/files/1.2.0-1.3.0.bsdiff").isEmpty)
        #expect(h.activeMatches("1.3.0"))

        let fresh = try SyncHarness()
        fresh.origin.setManifest(try Self.listing(fresh, "1.3.0", from: ["1.0.0", "1.1.0", "1.2.0"]))
        let first = await fresh.sync()
        #expect(first.result == .updated && first.via == .full, "\(first.error?.description ?? "")")
        #expect(fresh.activeMatches("1.3.0"))
    }

    @Test("a listed patch that is unusable falls back to the full package", arguments: ["corrupt", "wrong-base", "404"])
    func fallsBack(_ kind: String) async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        var manifest = try Self.listing(h, "1.1.0", from: ["1.0.0"])
        var entry = (manifest["patches"] as! [[String: Any]])[0]
        switch kind {
        case "corrupt":
            var patch = try h.fixture.patch(from: "1.0.0", to: "1.1.0")
            patch[patch.count - 20] ^= 0xff
            h.origin.put("1.0.0-1.1.0.bsdiff", patch)
            entry["sha256"] = PackageFixture.sha256(patch)
        case "wrong-base":
            // Correct bytes for another base: the result fails packageSha256.
            let patch = try h.fixture.patch(from: "1.2.0", to: "1.1.0")
            h.origin.put("1.0.0-1.1.0.bsdiff", patch)
            entry["size"] = patch.count
            entry["sha256"] = PackageFixture.sha256(patch)
        default:
            entry["url"] = "files/missing.bsdiff"
        }
        manifest["patches"] = [entry]
        h.origin.setManifest(manifest)
        let report = await h.sync()
        #expect(report.result == .updated, "\(report.error?.description ?? "")")
        #expect(report.via == .full)
        #expect(report.patchFallbackReason != nil)
        #expect(h.activeMatches("1.1.0"))
    }

    @Test("the entry this device would take is held to the size cap before anything is requested")
    func entryOverCap() async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        var manifest = try Self.listing(h, "1.1.0", from: ["1.0.0"])
        var entry = (manifest["patches"] as! [[String: Any]])[0]
        entry["size"] = 1 << 40
        manifest["patches"] = [entry]
        h.origin.setManifest(manifest)
        let report = await h.sync()
        #expect(report.result == .failed)
        #expect(report.error?.cause == .tooLarge, "\(report.error?.description ?? "")")
        #expect(h.origin.requests(for: "/files/1.0.0-1.1.0.bsdiff").isEmpty && h.origin.requests(for: "/files/1.1.0.zip").isEmpty)
        #expect(h.activeMatches("1.0.0"))
    }

    // MARK: manifestQuery

    @Test("the URL's own query is kept once, byte for byte, before app and current; manifestQuery false sends the URL as written",
          arguments: [
            ("http://h/m.json", true, "http://h/m.json?app=mall&current=1.2.0"),
            ("http://h/m.json?", true, "http://h/m.json?app=mall&current=1.2.0"),
            ("http://h/m.json?token=a%2Bb%3D&x", true, "http://h/m.json?token=a%2Bb%3D&x&app=mall&current=1.2.0"),
            ("http://h/m.json?k=1&", true, "http://h/m.json?k=1&app=mall&current=1.2.0"),
            ("http://h/m.json", false, "http://h/m.json"),
            ("http://h/m.json?token=a%2Bb%3D", false, "http://h/m.json?token=a%2Bb%3D"),
          ])
    func requestURL(_ base: String, _ append: Bool, _ expected: String) throws {
        let url = try ManifestClient.requestURL(URL(string: base)!, app: "mall", current: Version("1.2.0"), appendQuery: append)
        #expect(url.absoluteString == expected)
    }

    @Test("a sync with manifestQuery false requests the manifest without app and current, and still installs")
    func noQuery() async throws {
        let h = try SyncHarness()
        h.origin.setManifest(h.full("1.0.0"))
        let report = await h.agent().sync(app: "mall", manifest: h.origin.manifestURL, options: SyncOptions(force: true, manifestQuery: false))
        #expect(report.result == .updated, "\(report.error?.description ?? "")")
        let targets = h.origin.requests(for: "/manifest").map(\.target)
        #expect(targets == ["/manifest"])
        #expect(h.activeMatches("1.0.0"))
    }
}
