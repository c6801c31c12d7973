import Foundation
import Testing
@testable import OfflineAgent
import OfflinePublish
import TestSupport

/// Interop both ways with python-tuf 7.0.1, the TUF reference implementation, over a
/// real nginx: its `ngclient.Updater` reads what `offline-publish` writes, and
/// `offline-agent sync --trusted-root` installs from a repository python-tuf wrote.
@Suite("TUF interop (python-tuf, nginx)", .serialized, .enabled(if: PythonTUF.missing == nil, "\(PythonTUF.missing ?? "")"))
struct TUFInteropTests {
    typealias F = PublishFixtures

    /// `offline-publish ARGUMENTS`, which must succeed.
    static func publisher(_ arguments: [String]) async throws {
        let result = try await CLI.run(arguments, executable: CLI.publisher)
        #expect(result.status == 0, "offline-publish \(arguments.joined(separator: " ")): \(result.stderr)")
    }

    /// ngclient's view of the repository: the manifest's version and the targets it downloaded.
    static func ngclient(base: String, root: String, work: String) async throws -> [String: Any] {
        let out = try await PythonTUF.run("ngclient.py", [base, root, work, "sample"])
        return try #require(CLI.json(out))
    }

    /// `sample` 1.0.0 published without a key into `dir/published` (a python-tuf or
    /// hand-written repository's targets role signs it instead); returns that directory.
    static func unsignedSample(_ dir: TemporaryDirectory) throws -> String {
        let published = dir.file("published")
        _ = try Publisher.publish(PublishOptions(
            app: "sample", version: Version("1.0.0")!, sourceDirectory: F.sampleApp("1.0.0"), publishDirectory: published,
            whitelist: ["https://h5.example.com/sample/"], signingKey: nil))
        return published
    }

    /// `offline-agent sync --trusted-root ROOT --json` of `sample` from `base` into `device`: its report.
    static func trustedSync(device: String, base: String, root: String) async throws -> [String: Any] {
        let result = try await CLI.run([
            "sync", "--root", device, "--app", "sample", "--manifest", "\(base)/sample/manifest.json", "--trusted-root", root, "--json",
        ])
        return try #require(CLI.json(result.stdout), "\(result.stderr)")
    }

    @Test("python-tuf's ngclient refreshes and downloads the manifest and its files after publish, stage and revert")
    func ngclientReadsOurRepository() async throws {
        if let missing = Nginx.missing { Issue.record(Comment(rawValue: "skipped: \(missing)")); return }
        let dir = TemporaryDirectory("tuf-ngclient")
        let out = dir.file("publish"), key = dir.file("release.key")
        let nginx = try await Nginx(server: "root \(out);")
        defer { nginx.stop() }
        try await Self.publisher(["keygen", "--out", key])
        let common = ["--app", "sample", "--out", out, "--key", key]
        try await Self.publisher(["publish", "--version", "1.0.0", "--source", F.sampleApp("1.0.0"), "--whitelist", "https://h5.example.com/sample/"] + common)
        let root = "\(out)/metadata/1.root.json"
        let work = dir.file("ngclient")

        var seen = try await Self.ngclient(base: nginx.baseURL, root: root, work: work)
        #expect(seen["version"] as? String == "1.0.0")
        #expect(seen["downloaded"] as? [String] == ["sample/manifest.json", "sample/1.0.0.zip.gz"])
        var timestamp = try #require(seen["timestamp"] as? Int)

        try await Self.publisher(["publish", "--version", "1.1.0", "--source", F.sampleApp("1.1.0")] + common)
        seen = try await Self.ngclient(base: nginx.baseURL, root: root, work: work)
        #expect(seen["version"] as? String == "1.1.0")
        #expect(seen["downloaded"] as? [String] == ["sample/manifest.json", "sample/1.1.0.zip.gz", "sample/1.0.0-1.1.0.bsdiff"])
        #expect(try #require(seen["timestamp"] as? Int) > timestamp)
        timestamp = try #require(seen["timestamp"] as? Int)

        // A halt changes only the manifest: a new targets, snapshot and timestamp all the same.
        try await Self.publisher(["stage", "--percent", "0"] + common)
        seen = try await Self.ngclient(base: nginx.baseURL, root: root, work: work)
        #expect(try #require(seen["timestamp"] as? Int) > timestamp)
        timestamp = try #require(seen["timestamp"] as? Int)

        try await Self.publisher(["revert", "--to", "1.0.0"] + common)
        seen = try await Self.ngclient(base: nginx.baseURL, root: root, work: work)
        #expect(seen["version"] as? String == "1.1.1")
        #expect((seen["downloaded"] as? [String])?.contains("sample/1.1.1.zip.gz") == true)
        #expect(try #require(seen["timestamp"] as? Int) > timestamp)

        // The root devices trust stays version 1, never rewritten.
        #expect(FileManager.default.fileExists(atPath: root))
    }

    @Test("offline-agent sync --trusted-root installs from a repository python-tuf's tuf.api.metadata wrote")
    func agentReadsPythonRepository() async throws {
        if let missing = Nginx.missing { Issue.record(Comment(rawValue: "skipped: \(missing)")); return }
        let dir = TemporaryDirectory("tuf-python-repo")
        // Our manifest and package, published unsigned: python-tuf's targets role signs them.
        let published = try Self.unsignedSample(dir)
        let repo = dir.file("repo")
        try await PythonTUF.run("repository.py", [
            repo, "sample/manifest.json=\(published)/sample/manifest.json", "sample/1.0.0.zip.gz=\(published)/sample/1.0.0.zip.gz",
        ])
        let nginx = try await Nginx(server: "root \(repo);")
        defer { nginx.stop() }
        let device = dir.file("device")
        let report = try await Self.trustedSync(device: device, base: nginx.baseURL, root: "\(repo)/metadata/1.root.json")
        #expect(report["result"] as? String == "updated", "\(report)")
        try StaticCDNTests.expectInstalled(F.sampleApp("1.0.0"), version: "1.0.0", root: device)
        // It walked the root chain to the rotated root, and fetched the manifest by its hash.
        let paths = nginx.accessLog().map(\.path)
        #expect(paths.contains("/metadata/2.root.json") && paths.contains("/metadata/3.root.json"))
        #expect(paths.contains { $0.hasPrefix("/sample/") && $0.hasSuffix(".manifest.json") && $0 != "/sample/manifest.json" })
    }
}
