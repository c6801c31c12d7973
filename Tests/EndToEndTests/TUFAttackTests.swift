import Crypto
import Foundation
import Testing
@testable import OfflineAgent
import OfflinePublish
import TestSupport

/// TUF's attack list against a device syncing with `--trusted-root` from nginx serving
/// a publish directory that an attacker (a CDN edge, a mirror, anyone on the path)
/// tampers with. Each attack ends with the installed version whole and a cause code.
@Suite("TUF attacks (nginx)", .serialized)
struct TUFAttackTests {
    typealias F = PublishFixtures

    /// A publish directory with 1.0.0 and 1.1.0 (whitelisted, signed by one key), served by
    /// nginx, and a device that installed 1.0.0 from it with `--trusted-root`.
    final class Scene: @unchecked Sendable {
        let dir = TemporaryDirectory("tuf-attack")
        let key = SigningKey.generate()
        var out: String { dir.file("publish") }
        var device: String { dir.file("device") }
        var metadata: String { "\(out)/metadata" }
        let nginx: Nginx

        init() async throws {
            nginx = try await Nginx(server: "root \(dir.file("publish"));")
        }

        func publish(_ version: String, stage: Int? = nil) throws {
            var options = PublishOptions(
                app: "sample", version: Version(version)!, sourceDirectory: F.sampleApp(version), publishDirectory: out,
                whitelist: ["https://h5.example.com/sample/"], signingKey: key)
            options.stage = stage
            _ = try Publisher.publish(options)
        }

        func sync() async throws -> [String: Any] {
            let result = try await CLI.run([
                "sync", "--root", device, "--app", "sample", "--manifest", "\(nginx.baseURL)/sample/manifest.json",
                "--trusted-root", "\(metadata)/1.root.json", "--force", "--json",
            ])
            return CLI.json(result.stdout) ?? ["stderr": result.stderr]
        }

        func read(_ path: String) throws -> Data { try Data(contentsOf: URL(fileURLWithPath: path)) }
        func write(_ data: Data, _ path: String) throws { try data.write(to: URL(fileURLWithPath: path)) }

        /// The refused sync left `version` installed, whole, and said `cause`.
        func expectRefused(_ report: [String: Any], cause: String, installed version: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
            #expect(report["result"] as? String == "failed", "\(report)", sourceLocation: sourceLocation)
            #expect(report["errorCode"] as? String == cause, "\(report)", sourceLocation: sourceLocation)
            try StaticCDNTests.expectInstalled(F.sampleApp(version), version: version, root: device, sourceLocation: sourceLocation)
        }

        deinit { nginx.stop() }
    }

    static func started() async throws -> Scene? {
        if let missing = Nginx.missing { Issue.record(Comment(rawValue: "skipped: \(missing)")); return nil }
        return try await Scene()
    }

    @Test("rollback: a halt undone by replaying the metadata from before it is refused (metadata-replay)")
    func haltUndoneByReplay() async throws {
        guard let scene = try await Self.started() else { return }
        try scene.publish("1.0.0")
        #expect(try await scene.sync()["result"] as? String == "updated")
        try scene.publish("1.1.0", stage: 100)
        // What the origin said while 1.1.0 was live: kept by a CDN edge.
        let liveTimestamp = try scene.read("\(scene.metadata)/timestamp.json")
        let liveManifest = try scene.read("\(scene.out)/sample/manifest.json")
        try ReleaseEditor.stage(app: "sample", publishDirectory: scene.out, percent: 0, key: scene.key)
        let halted = try await scene.sync()
        #expect(halted["result"] as? String == "not-in-stage", "\(halted)")
        // The edge serves last week's answer again (all of it still in the directory: consistent snapshots).
        try scene.write(liveTimestamp, "\(scene.metadata)/timestamp.json")
        try scene.write(liveManifest, "\(scene.out)/sample/manifest.json")
        try scene.expectRefused(try await scene.sync(), cause: "metadata-replay", installed: "1.0.0")
    }

    @Test("freeze: an expired timestamp is refused (metadata-expired); a fresh one is taken")
    func indefiniteFreeze() async throws {
        guard let scene = try await Self.started() else { return }
        try scene.publish("1.0.0")
        #expect(try await scene.sync()["result"] as? String == "updated")
        try scene.publish("1.1.0")
        try TUFRepository.refreshTimestamp(publishDirectory: scene.out, key: scene.key, expires: Date().addingTimeInterval(-60))
        try scene.expectRefused(try await scene.sync(), cause: "metadata-expired", installed: "1.0.0")
        try TUFRepository.refreshTimestamp(publishDirectory: scene.out, key: scene.key, expires: Date().addingTimeInterval(3600))
        #expect(try await scene.sync()["result"] as? String == "updated")
    }

    @Test("endless data: metadata above its cap and a manifest longer than listed are cut off (length-exceeded)")
    func endlessData() async throws {
        guard let scene = try await Self.started() else { return }
        try scene.publish("1.0.0")
        #expect(try await scene.sync()["result"] as? String == "updated")
        try scene.publish("1.1.0")
        let timestamp = try scene.read("\(scene.metadata)/timestamp.json")
        // Valid JSON, 20 KB of whitespace: above the 16,384-byte cap for a timestamp.
        try scene.write(timestamp + Data(repeating: 0x20, count: 20_000), "\(scene.metadata)/timestamp.json")
        try scene.expectRefused(try await scene.sync(), cause: "length-exceeded", installed: "1.0.0")
        try scene.write(timestamp, "\(scene.metadata)/timestamp.json")
        let manifest = try scene.read("\(scene.out)/sample/manifest.json")
        let prefixed = "\(scene.out)/sample/\(SHA256.hash(data: manifest).hex).manifest.json"
        try FileManager.default.removeItem(atPath: prefixed)
        try scene.write(manifest + Data(repeating: 0x20, count: 1 << 20), prefixed)
        try scene.expectRefused(try await scene.sync(), cause: "length-exceeded", installed: "1.0.0")
    }

    @Test("mix-and-match: a snapshot of another release under the name timestamp points at is refused (metadata-mismatch)")
    func mixAndMatch() async throws {
        guard let scene = try await Self.started() else { return }
        try scene.publish("1.0.0")
        #expect(try await scene.sync()["result"] as? String == "updated")
        let versions = try TUFRepository.refresh(publishDirectory: scene.out, keys: TUFKeys(all: scene.key), now: Date())
        try scene.publish("1.1.0")
        let next = versions.snapshot + 1
        // A mirror puts the old snapshot (validly signed, older targets) under the new name.
        try FileManager.default.removeItem(atPath: "\(scene.metadata)/\(next).snapshot.json")
        try FileManager.default.copyItem(atPath: "\(scene.metadata)/\(versions.snapshot).snapshot.json", toPath: "\(scene.metadata)/\(next).snapshot.json")
        try scene.expectRefused(try await scene.sync(), cause: "metadata-mismatch", installed: "1.0.0")
    }

    @Test("fewer keys than the threshold: a timestamp signed by a key root does not name is refused (threshold-not-met)")
    func thresholdNotMet() async throws {
        guard let scene = try await Self.started() else { return }
        try scene.publish("1.0.0")
        #expect(try await scene.sync()["result"] as? String == "updated")
        try scene.publish("1.1.0")
        let current = try TUFTimestamp(try scene.read("\(scene.metadata)/timestamp.json"))
        var signed = current.metadata.signed.members
        signed["version"] = .number(String(current.metadata.version + 1))
        try scene.write(try TUFSigner.file(signed, keys: [SigningKey.generate()]), "\(scene.metadata)/timestamp.json")
        try scene.expectRefused(try await scene.sync(), cause: "threshold-not-met", installed: "1.0.0")
    }

    @Test("a bad root rotation: 2.root.json signed only by its own new key is refused (root-chain-broken)")
    func badRootRotation() async throws {
        guard let scene = try await Self.started() else { return }
        try scene.publish("1.0.0")
        #expect(try await scene.sync()["result"] as? String == "updated")
        try scene.publish("1.1.0")
        var thief = TUFFixture()
        thief.timestamp = [SigningKey.generate()]
        try scene.write(try thief.rootFile(version: 2), "\(scene.metadata)/2.root.json")
        try scene.expectRefused(try await scene.sync(), cause: "root-chain-broken", installed: "1.0.0")
    }

    @Test("arbitrary installation: a manifest or package with other bytes than targets lists is refused (hash-mismatch)")
    func arbitraryInstallation() async throws {
        guard let scene = try await Self.started() else { return }
        try scene.publish("1.0.0")
        #expect(try await scene.sync()["result"] as? String == "updated")
        try scene.publish("1.1.0")
        // The hash-prefixed manifest swapped for one of the same length.
        let manifest = try scene.read("\(scene.out)/sample/manifest.json")
        let prefixed = "\(scene.out)/sample/\(SHA256.hash(data: manifest).hex).manifest.json"
        var forged = manifest
        forged[forged.count - 2] ^= 0x01
        try FileManager.default.removeItem(atPath: prefixed)
        try scene.write(forged, prefixed)
        try scene.expectRefused(try await scene.sync(), cause: "hash-mismatch", installed: "1.0.0")
        try FileManager.default.removeItem(atPath: prefixed)
        try scene.write(manifest, prefixed)
        // The package (and patch) replaced with other bytes of the same length.
        for name in ["1.1.0.zip.gz", "1.0.0-1.1.0.bsdiff"] {
            let path = "\(scene.out)/sample/\(name)"
            var bytes = try scene.read(path)
            bytes[bytes.count / 2] ^= 0xFF
            try FileManager.default.removeItem(atPath: path)
            try scene.write(bytes, path)
        }
        try scene.expectRefused(try await scene.sync(), cause: "hash-mismatch", installed: "1.0.0")
    }
}
