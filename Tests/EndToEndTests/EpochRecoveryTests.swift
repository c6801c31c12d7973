import Foundation
import Testing
import OfflineAgent
import OfflinePublish
import TestSupport

/// Row 4 of issue 37: a validly signed version published too high (`999999999.0.0`)
/// used to pin every device for ever (`publish` and `revert` need a higher version,
/// devices refuse a lower one). `revert --new-epoch` moves the devices back down with
/// nothing done on them: real publish directory, real `offline-server`, real `sync`,
/// for a device on a trusted root and one on the legacy public key.
@Suite("Epoch recovery")
struct EpochRecoveryTests {
    typealias F = PublishFixtures

    static func publisher(_ arguments: [String]) async throws -> CLI.Result {
        let result = try await CLI.run(arguments, executable: CLI.publisher)
        #expect(result.status == 0, "\(arguments): \(result.stderr)")
        return result
    }

    static func publish(_ version: String, source: String, out: String, key: String, extra: [String] = []) async throws {
        _ = try await publisher(
            ["publish", "--app", "mall", "--version", version, "--source", F.sampleApp(source), "--out", out,
             "--whitelist", "https://h5.example.com/mall/", "--key", key] + extra)
    }

    /// Syncs each device and returns its `sync --json` report.
    static func syncAll(_ devices: [[String]]) async throws -> [[String: Any]] {
        var reports: [[String: Any]] = []
        for sync in devices { reports.append(try #require(CLI.json(try await CLI.run(sync).stdout))) }
        return reports
    }

    @Test("revert --new-epoch takes devices off a signed 999999999.0.0 back to 1.0.1; a replay of the old epoch is refused (epoch-rollback)")
    func recovery() async throws {
        let dir = TemporaryDirectory("epoch-recovery")
        let out = dir.file("publish"), key = dir.file("signing.key")
        _ = try await Self.publisher(["keygen", "--out", key])
        try await Self.publish("1.0.0", source: "1.0.0", out: out, key: key)
        let server = try await OfflineServerProcess(arguments: ["--dir", out, "--key", key, "--no-reports"])
        let manifestURL = "\(server.baseURL)/mall/manifest.json"
        let trusted = ["sync", "--root", dir.file("tuf-device"), "--app", "mall", "--manifest", manifestURL,
                       "--trusted-root", "\(out)/metadata/1.root.json", "--force", "--json"]
        let legacy = ["sync", "--root", dir.file("key-device"), "--app", "mall", "--manifest", manifestURL,
                      "--public-key", key + ".pub", "--force", "--json"]
        let devices = [trusted, legacy]
        for report in try await Self.syncAll(devices) {
            #expect(report["result"] as? String == "updated" && report["version"] as? String == "1.0.0", "\(report)")
        }

        // The typo: signed, valid, installed everywhere.
        try await Self.publish("999999999.0.0", source: "1.1.0", out: out, key: key)
        for report in try await Self.syncAll(devices) {
            #expect(report["result"] as? String == "updated" && report["version"] as? String == "999999999.0.0", "\(report)")
        }
        let appDirectory = "\(out)/mall"
        let oldManifest = try Data(contentsOf: URL(fileURLWithPath: "\(appDirectory)/manifest.json"))
        let oldSignature = try Data(contentsOf: URL(fileURLWithPath: "\(appDirectory)/manifest.json.sig"))

        // Without an epoch nothing can move them: a lower version is refused by the publisher.
        let refused = try await CLI.run(["revert", "--app", "mall", "--out", out, "--to", "1.0.0", "--version", "1.0.1", "--key", key],
                                        executable: CLI.publisher)
        #expect(refused.status != 0 && refused.stderr.contains("not greater"), "\(refused.stderr)")

        // The recovery: the package of 1.0.0 as 1.0.1, epoch 1.
        let revert = try await Self.publisher(["revert", "--app", "mall", "--out", out, "--to", "1.0.0", "--new-epoch", "--key", key])
        #expect(revert.stdout.contains("as 1.0.1 (epoch 1)"), "\(revert.stdout)")
        for report in try await Self.syncAll(devices) {
            #expect(report["result"] as? String == "updated" && report["version"] as? String == "1.0.1", "\(report)")
        }
        for root in [dir.file("tuf-device"), dir.file("key-device")] {
            let status = try await CLI.run(["status", "--root", root, "--app", "mall", "--json"])
            #expect(status.stdout.contains("\"1.0.1\""), "\(status.stdout)")
        }

        // A CDN replays the old epoch's signed manifest: the key device refuses it by its
        // epoch (the TUF device never sees it: its targets metadata names other bytes).
        let newManifest = try Data(contentsOf: URL(fileURLWithPath: "\(appDirectory)/manifest.json"))
        let newSignature = try Data(contentsOf: URL(fileURLWithPath: "\(appDirectory)/manifest.json.sig"))
        try oldManifest.write(to: URL(fileURLWithPath: "\(appDirectory)/manifest.json"))
        try oldSignature.write(to: URL(fileURLWithPath: "\(appDirectory)/manifest.json.sig"))
        let replayed = try #require(CLI.json(try await CLI.run(legacy).stdout))
        #expect(replayed["result"] as? String == "failed" && replayed["errorCode"] as? String == "epoch-rollback", "\(replayed)")
        try newManifest.write(to: URL(fileURLWithPath: "\(appDirectory)/manifest.json"))
        try newSignature.write(to: URL(fileURLWithPath: "\(appDirectory)/manifest.json.sig"))

        // The new epoch goes on as usual: the next version, a patch from 1.0.1.
        try await Self.publish("1.0.2", source: "1.2.0", out: out, key: key)
        for report in try await Self.syncAll(devices) {
            #expect(report["result"] as? String == "updated" && report["version"] as? String == "1.0.2", "\(report)")
        }
        await server.stop()
    }
}
