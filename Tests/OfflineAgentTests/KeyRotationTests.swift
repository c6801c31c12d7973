import Crypto
import Foundation
import Testing
@testable import OfflineAgent
import TestSupport

/// Key rotation: several trusted keys (`publicKeys`), any of which verifies a manifest,
/// and `--public-key` given as base64 or as the path of a key file.
@Suite("Trusted key lists")
struct KeyRotationTests {
    static func base64(_ key: Curve25519.Signing.PrivateKey) -> String { key.publicKey.rawRepresentation.base64EncodedString() }

    static func sign(_ h: SyncHarness, _ version: String, with key: Curve25519.Signing.PrivateKey) throws {
        let body = [UInt8](try JSONSerialization.data(withJSONObject: h.full(version), options: [.sortedKeys]))
        h.origin.setManifest(raw: body, headers: [("X-Offline-Signature", try key.signature(for: body).base64EncodedString())])
    }

    @Test("a manifest signed by any listed key verifies; by none, signature-invalid", arguments: [0, 1, 2])
    func anyListedKey(signer: Int) async throws {
        let keys = (0..<3).map { _ in Curve25519.Signing.PrivateKey() }
        let h = try SyncHarness()
        try Self.sign(h, "1.0.0", with: keys[signer])
        // Keys 0 and 1 are trusted (old and new); 2 is not.
        let options = SyncOptions(force: true, publicKey: Self.base64(keys[0]), publicKeys: [Self.base64(keys[1])])
        let report = await h.agent().sync(app: "mall", manifest: h.origin.manifestURL, options: options)
        if signer < 2 {
            #expect(report.result == .updated, "\(report.error?.description ?? "")")
        } else {
            #expect(report.error?.cause == .signatureInvalid, "\(report.error?.description ?? "no error")")
            #expect(h.origin.requests(for: "/files/1.0.0.zip").isEmpty)
        }
    }

    @Test("sync --config: publicKeys at the top level or per app")
    func configKeyList() async throws {
        let old = Curve25519.Signing.PrivateKey(), new = Curve25519.Signing.PrivateKey()
        let h = try SyncHarness()
        try Self.sign(h, "1.0.0", with: new)
        let config: [String: Any] = [
            "root": h.root.path, "publicKeys": [Self.base64(old), Self.base64(new)],
            "apps": [["app": "mall", "manifest": h.origin.manifestURL.absoluteString]],
        ]
        let file = h.root.file("agent.json")
        try FileManager.default.createDirectory(atPath: h.root.path, withIntermediateDirectories: true)
        try JSONSerialization.data(withJSONObject: config).write(to: URL(fileURLWithPath: file))
        let result = try await CLI.run(["sync", "--config", file, "--json"])
        #expect(result.status == 0, "\(result.stdout) \(result.stderr)")
        #expect(CLI.json(result.stdout)?["result"] as? String == "updated")
    }

    @Test("--public-key accepts the path of a key file; anything else is a usage error", arguments: [true, false])
    func publicKeyFile(exists: Bool) async throws {
        let h = try SyncHarness()
        let dir = TemporaryDirectory("keys")
        let key = Curve25519.Signing.PrivateKey()
        try Self.sign(h, "1.0.0", with: key)
        let path = dir.file("agent.pub")
        if exists { try (Self.base64(key) + "\n").write(toFile: path, atomically: true, encoding: .utf8) }
        let result = try await CLI.run(["sync", "--allow-unsigned", "--root", h.root.path, "--app", "mall", "--manifest", h.origin.manifestURL.absoluteString,
                                  "--public-key", path, "--json"])
        if exists {
            #expect(result.status == 0, "\(result.stdout) \(result.stderr)")
            #expect(CLI.json(result.stdout)?["result"] as? String == "updated")
        } else {
            #expect(result.status == 64)
            #expect(result.stderr.contains("neither base64 nor a readable file"), "\(result.stderr)")
        }
    }
}
