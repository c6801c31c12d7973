import Foundation
import Testing
@testable import OfflineAgent
import TestSupport

/// The tools' side of mirrored origins: a synced manifest's `fallback` reaches the
/// installed record, `resolve --serve-port` prints the mirror URL a web view loads, and
/// `publish --fallback` writes the field (refusing a path that is no file of the package).
@Suite("Mirror CLI")
struct MirrorCLITests {
    @Test("sync keeps the manifest's fallback; resolve --serve-port prints the mirror URL")
    func resolveMirror() async throws {
        let h = try SyncHarness()
        let base = ["--root", h.root.path]
        h.origin.setManifest(h.full("1.0.0", ["fallback": "index.html"]))
        let sync = try await CLI.run(["sync", "--allow-unsigned"] + base + ["--app", "mall", "--manifest", h.origin.manifestURL.absoluteString, "--json"])
        #expect(sync.status == 0, "\(sync.stderr)")
        #expect(Store(root: h.root.path).active("mall")?.fallback == "index.html")

        let cases: [(String, String)] = [
            ("\(SyncHarness.whitelist)index.html?x=1#top", "http://h5.example.com.localhost:8421/mall/index.html?x=1#top"),
            // Same origin, outside the whitelist: still its mirror (which forwards).
            ("https://h5.example.com/login", "http://h5.example.com.localhost:8421/login"),
            ("https://H5.EXAMPLE.COM:443/mall/orders/42", "http://h5.example.com.localhost:8421/mall/orders/42"),
        ]
        for (url, mirror) in cases {
            let resolved = try await CLI.run(["resolve"] + base + ["--serve-port", "8421", url])
            #expect(resolved.status == 0, "\(url): \(resolved.stderr)")
            #expect(resolved.stdout == mirror + "\n", "\(url)")
        }
        for url in ["https://elsewhere.example.com/x.js", "http://h5.example.com/mall/index.html"] {
            let outside = try await CLI.run(["resolve"] + base + ["--serve-port", "8421", url])
            #expect(outside.status == 1, "\(url)")
            #expect(outside.stderr.contains("not on a mirrored origin"), "\(url)")
            #expect(outside.stdout.isEmpty)
        }
        let badPort = try await CLI.run(["resolve"] + base + ["--serve-port", "0", SyncHarness.whitelist])
        #expect(badPort.status == 64)
        // Without --serve-port: the file, as before.
        let file = try await CLI.run(["resolve"] + base + ["\(SyncHarness.whitelist)index.html"])
        #expect(file.status == 0 && file.stdout.hasSuffix("/versions/1.0.0/index.html\n"))
    }

    @Test("publish --fallback writes the manifest field, kept by the next publish; a path that is no file of the package is refused")
    func publishFallback() async throws {
        let scratch = TemporaryDirectory("mirror-publish")
        let out = scratch.file("out")
        func publish(_ version: String, _ extra: [String]) async throws -> CLI.Result {
            try await CLI.run(
                ["publish", "--app", "spa", "--version", version, "--source", PublishFixtures.sampleApp(version), "--out", out,
                 "--whitelist", "https://h5.example.com/", "--unsigned"] + extra, executable: CLI.publisher)
        }
        func manifest() throws -> Manifest {
            try Manifest.decode(try Data(contentsOf: URL(fileURLWithPath: "\(out)/spa/manifest.json")))
        }
        for (bad, label) in [("missing.html", "no such file"), ("js", "a directory"), ("../index.html", "leaves the package"),
                             ("/index.html", "absolute"), ("./index.html", "not normalised")] {
            let refused = try await publish("1.0.0", ["--fallback", bad])
            #expect(refused.status == 64, "\(label): \(refused.stderr)")
            #expect(refused.stderr.contains("fallback"), "\(label): \(refused.stderr)")
            #expect(!FileManager.default.fileExists(atPath: "\(out)/spa"), "\(label): nothing published")
        }
        let first = try await publish("1.0.0", ["--fallback", "index.html"])
        #expect(first.status == 0, "\(first.stderr)")
        #expect(try manifest().fallback == "index.html")
        let second = try await publish("1.1.0", [])
        #expect(second.status == 0, "\(second.stderr)")
        #expect(try manifest().fallback == "index.html")
        #expect(try manifest().version == Version("1.1.0")!)
    }
}
