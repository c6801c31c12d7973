import Foundation
import Testing
@testable import OfflineAgent
import TestSupport

@Suite("CLI")
struct CLITests {
    @Test("sync --json, status --json, resolve and rollback")
    func lifecycle() async throws {
        let h = try SyncHarness()
        let base = ["--root", h.root.path]
        let sync = ["sync", "--allow-unsigned"] + base + ["--app", "mall", "--manifest", h.origin.manifestURL.absoluteString, "--json"]
        h.origin.setManifest(h.full("1.0.0"))
        let first = try await CLI.run(sync)
        #expect(first.status == 0, "\(first.stderr)")
        let json = try #require(CLI.json(first.stdout))
        #expect(json["app"] as? String == "mall")
        #expect(json["result"] as? String == "updated")
        #expect(json["version"] as? String == "1.0.0")
        #expect(json["previousVersion"] is NSNull)
        #expect(json["via"] as? String == "full")
        #expect(json["bytesDownloaded"] as? Int == h.fixture.bytes("1.0.0").count)

        let throttled = try await CLI.run(sync)
        #expect(throttled.status == 0)
        #expect(CLI.json(throttled.stdout)?["result"] as? String == "throttled")
        // The no-op reports the installed version (read from the `current` link alone).
        #expect(CLI.json(throttled.stdout)?["version"] as? String == "1.0.0")
        #expect(CLI.json(throttled.stdout)?["previousVersion"] as? String == "1.0.0")

        h.origin.setManifest(try h.patch(from: "1.0.0", to: "1.1.0"))
        let patched = try await CLI.run(sync + ["--force"])
        #expect(patched.status == 0, "\(patched.stderr)")
        #expect(CLI.json(patched.stdout)?["via"] as? String == "patch")
        #expect(CLI.json(patched.stdout)?["previousVersion"] as? String == "1.0.0")

        let status = try await CLI.run(["status"] + base + ["--app", "mall", "--json"])
        let object = try #require(CLI.json(status.stdout))
        #expect(object["version"] as? String == "1.1.0")
        #expect(object["usable"] as? Bool == true)
        #expect(object["whitelist"] as? [String] == [SyncHarness.whitelist])
        #expect((object["path"] as? String)?.hasSuffix("/versions/1.1.0") == true)
        #expect(object["lastCheck"] is String)
        let all = try await CLI.run(["status"] + base + ["--json"])
        #expect((CLI.json(all.stdout)?["apps"] as? [[String: Any]])?.count == 1)

        let resolved = try await CLI.run(["resolve"] + base + ["\(SyncHarness.whitelist)js/app.js"])
        #expect(resolved.status == 0)
        #expect(FileManager.default.contents(atPath: resolved.stdout.trimmingCharacters(in: .whitespacesAndNewlines)).map { [UInt8]($0) }
            == h.expected("1.1.0", "js/app.js"))
        let outside = try await CLI.run(["resolve"] + base + ["https://elsewhere.example.com/x.js"])
        #expect(outside.status == 1)
        #expect(outside.stderr.contains("not-whitelisted"))

        let rollback = try await CLI.run(["rollback"] + base + ["--app", "mall"])
        #expect(rollback.status == 0, "\(rollback.stderr)")
        #expect(h.activeMatches("1.0.0"))
        let again = try await CLI.run(["rollback"] + base + ["--app", "mall"])
        #expect(again.status == 1)
    }

    @Test("failed sync exits 1 with the error in JSON; usage errors exit 64")
    func exitCodes() async throws {
        let h = try SyncHarness()
        h.origin.setManifestReply { _ in .status(500) }
        let failed = try await CLI.run(["sync", "--allow-unsigned", "--root", h.root.path, "--app", "mall", "--manifest", h.origin.manifestURL.absoluteString, "--json"])
        #expect(failed.status == 1)
        let json = try #require(CLI.json(failed.stdout))
        #expect(json["result"] as? String == "failed")
        #expect((json["error"] as? String)?.contains("500") == true)
        #expect(json["version"] is NSNull)
        #expect(try await CLI.run(["sync", "--allow-unsigned", "--root", h.root.path]).status == 64)
        let badNetwork = try await CLI.run(["sync", "--allow-unsigned", "--root", h.root.path, "--app", "mall", "--manifest", "x", "--network", "cellular"])
        #expect(badNetwork.status == 64)
        // `NetworkPolicy` lists its own values (NetworkPolicy+ExpressibleByArgument.swift).
        #expect(badNetwork.stderr.contains("'auto', 'metered' or 'unmetered'"), "\(badNetwork.stderr)")
        #expect(try await CLI.run(["frobnicate"]).status == 64)
        let badApp = try await CLI.run(["sync", "--allow-unsigned", "--root", h.root.path, "--app", "../etc", "--manifest", h.origin.manifestURL.absoluteString])
        #expect(badApp.status == 64)
    }

    @Test("sync --config syncs every listed app")
    func config() async throws {
        let h = try SyncHarness()
        h.origin.setManifestReply { request in
            let app = request.query["app"] ?? ""
            // Each app on its own origin: one origin belongs to one app.
            var manifest = h.full("1.0.0", ["whitelist": ["https://\(app).example.com/"]])
            manifest["app"] = app
            return .ok([UInt8](try! JSONSerialization.data(withJSONObject: manifest)))
        }
        let config = h.root.file("agent.json")
        let root = h.root.file("data")
        let text = """
            {"root": "\(root)", "allowUnsigned": true, "apps": [{"app": "mall", "manifest": "\(h.origin.manifestURL)"},
                                          {"app": "shop", "manifest": "\(h.origin.manifestURL)"}]}
            """
        try text.write(toFile: config, atomically: true, encoding: .utf8)
        let result = try await CLI.run(["sync", "--config", config, "--json"])
        #expect(result.status == 0, "\(result.stderr)")
        let lines = result.stdout.split(separator: "\n").compactMap { CLI.json(String($0)) }
        #expect(lines.map { $0["app"] as? String } == ["mall", "shop"])
        #expect(lines.allSatisfy { $0["result"] as? String == "updated" })
        #expect(Store(root: root).apps() == ["mall", "shop"])
    }

    @Test("patch and extract plumbing: 0 on success, 1 with one line on refusal, never a signal")
    func plumbing() async throws {
        let fixture = try PackageFixture()
        let scratch = TemporaryDirectory("cli")
        let patch = scratch.file("p.bsdiff")
        try Data(try fixture.patch(from: "1.0.0", to: "1.2.0")).write(to: URL(fileURLWithPath: patch))
        let ok = try await CLI.run(["patch", fixture.package("1.0.0"), patch, scratch.file("new.zip")])
        #expect(ok.status == 0, "\(ok.stderr)")
        #expect(FileManager.default.contents(atPath: scratch.file("new.zip")) == FileManager.default.contents(atPath: fixture.package("1.2.0")))
        // --sync flushes before the rename (as installs do); the bytes are the same.
        let synced = try await CLI.run(["patch", "--sync", fixture.package("1.0.0"), patch, scratch.file("synced.zip")])
        #expect(synced.status == 0, "\(synced.stderr)")
        #expect(FileManager.default.contents(atPath: scratch.file("synced.zip")) == FileManager.default.contents(atPath: fixture.package("1.2.0")))
        try Data("BSDIFF40 but not really".utf8).write(to: URL(fileURLWithPath: scratch.file("bad")))
        let refused = try await CLI.run(["patch", fixture.package("1.0.0"), scratch.file("bad"), scratch.file("x.zip")])
        #expect(refused.status == 1 && !refused.signaled)
        #expect(refused.stderr.split(separator: "\n").count == 1)
        #expect(!FileManager.default.fileExists(atPath: scratch.file("x.zip")))

        let extracted = try await CLI.run(["extract", scratch.file("new.zip"), scratch.file("out")])
        #expect(extracted.status == 0, "\(extracted.stderr)")
        #expect(tree(scratch.file("out")) == tree("\(Repo.fixtures)/sample-app/1.2.0"))
        var zip = ZipBuilder()
        zip.file("../evil", "x")
        try zip.write(to: scratch.file("evil.zip"))
        let hostile = try await CLI.run(["extract", scratch.file("evil.zip"), scratch.file("out2")])
        #expect(hostile.status == 1 && !hostile.signaled)
        #expect(hostile.stderr.contains("'..'"))
        #expect(try await CLI.run(["extract", scratch.file("evil.zip")]).status == 64)
    }
}
