import Foundation
import Testing
import OfflineAgent
import OfflinePublish
import TestSupport

/// The README's walk-through under TUF: `offline-server` serves a keyed publish
/// directory's `metadata/` and hash-prefixed targets, and a device that trusts
/// `metadata/1.root.json` installs, then takes the next version as a patch.
@Suite("TUF through offline-server")
struct TUFReferenceServerTests {
    typealias F = PublishFixtures

    static func publish(_ version: String, out: String, key: String) async throws {
        let result = try await CLI.run(
            ["publish", "--app", "mall", "--version", version, "--source", F.sampleApp(version), "--out", out,
             "--whitelist", "https://h5.example.com/mall/", "--key", key],
            executable: CLI.publisher)
        #expect(result.status == 0, "\(result.stderr)")
    }

    @Test("offline-server serves the TUF repository: a trusted-root device installs, then patches; metadata caches by its name")
    func walkThrough() async throws {
        let dir = TemporaryDirectory("tuf-server")
        let out = dir.file("publish"), key = dir.file("signing.key"), root = dir.file("device")
        let keygen = try await CLI.run(["keygen", "--out", key], executable: CLI.publisher)
        #expect(keygen.status == 0, "\(keygen.stderr)")
        try await Self.publish("1.0.0", out: out, key: key)
        let server = try await OfflineServerProcess(arguments: ["--dir", out, "--key", key, "--no-reports"])

        let sync = ["sync", "--root", root, "--app", "mall", "--manifest", "\(server.baseURL)/mall/manifest.json",
                    "--trusted-root", "\(out)/metadata/1.root.json", "--force", "--json"]
        let first = try #require(CLI.json(try await CLI.run(sync).stdout))
        #expect(first["result"] as? String == "updated" && first["version"] as? String == "1.0.0", "\(first)")

        try await Self.publish("1.1.0", out: out, key: key)
        let second = try #require(CLI.json(try await CLI.run(sync).stdout))
        #expect(second["result"] as? String == "updated" && second["version"] as? String == "1.1.0", "\(second)")
        #expect(second["via"] as? String == "patch", "\(second)")

        // Metadata: the timestamp changes in place (revalidated), version-named files never do.
        let timestamp = try await LocalHTTP.request(port: server.port, "/metadata/timestamp.json")
        #expect(timestamp.status == 200 && timestamp.header("cache-control")?.contains("immutable") == false, "\(timestamp.status)")
        let rootFile = try await LocalHTTP.request(port: server.port, "/metadata/1.root.json")
        #expect(rootFile.status == 200 && rootFile.header("cache-control")?.contains("immutable") == true)
        // Nothing else of the directory: not a leftover, not a name outside the scheme.
        for path in ["/metadata/0.root.json", "/metadata/01.root.json", "/metadata/1.root.json.tmp", "/metadata/root.json", "/metadata/.lock"] {
            #expect(try await LocalHTTP.request(port: server.port, path).status == 404, "\(path)")
        }
        await server.stop()
    }
}
