import Foundation
import Testing
import OfflineAgent
@testable import OfflinePublish
import TestSupport

/// Issue 37 row 3: keys rotate in band through signed roots, m of n. `offline-publish
/// root propose|sign|commit` moves a one-key repository to a 2-of-3 root with a new
/// online key; a device on `1.root.json` (ours, and python-tuf's ngclient) follows the
/// chain, and the rotation of the timestamp key is the fast-forward recovery (5.3.11)
/// for a device a stolen key froze.
@Suite("TUF root rotation")
struct TUFRootRotationTests {
    typealias F = PublishFixtures

    static func publisher(_ arguments: [String]) async throws -> CLI.Result {
        let result = try await CLI.run(arguments, executable: CLI.publisher)
        #expect(result.status == 0, "offline-publish \(arguments.joined(separator: " ")): \(result.stderr)")
        return result
    }

    @Test("root propose, sign by 2 of 3, commit: devices on root 1 follow; fewer signatures are refused; the old key is out; a fast-forwarded timestamp is recovered")
    func rotation() async throws {
        let dir = TemporaryDirectory("tuf-rotation")
        let out = dir.file("publish"), metadata = dir.file("publish/metadata"), proposal = dir.file("root-2.json")
        for name in ["release", "root-a", "root-b", "root-c", "online"] { _ = try await Self.publisher(["keygen", "--out", dir.file("\(name).key")]) }
        func key(_ name: String) -> String { dir.file("\(name).key") }
        let common = ["--app", "sample", "--out", out, "--whitelist", "https://h5.example.com/sample/"]
        _ = try await Self.publisher(["publish", "--version", "1.0.0", "--source", F.sampleApp("1.0.0"), "--key", key("release")] + common)
        let server = try await OfflineServerProcess(arguments: ["--dir", out, "--no-reports"])
        let sync = ["sync", "--root", dir.file("device"), "--app", "sample", "--manifest", "\(server.baseURL)/sample/manifest.json",
                    "--trusted-root", "\(metadata)/1.root.json", "--force", "--json"]
        func synced() async throws -> [String: Any] { try #require(CLI.json(try await CLI.run(sync).stdout)) }
        var report = try await synced()
        #expect(report["result"] as? String == "updated" && report["version"] as? String == "1.0.0", "\(report)")
        let python = PythonTUF.missing == nil
        if python {
            let seen = try #require(CLI.json(try await PythonTUF.run("ngclient.py", [server.baseURL, "\(metadata)/1.root.json", dir.file("ngclient"), "sample"])))
            #expect(seen["version"] as? String == "1.0.0", "\(seen)")
        }

        // A stolen timestamp key fast-forwards the device: a timestamp of version 1 000 000.
        let real = try Data(contentsOf: URL(fileURLWithPath: "\(metadata)/timestamp.json"))
        let snapshot = try TUFTimestamp(real).snapshot.version
        var forged = TUFSigner.common(type: "timestamp", version: 1_000_000, expires: Date().addingTimeInterval(86_400))
        forged["meta"] = .object(["snapshot.json": TUFMetaFile(version: snapshot).json])
        try TUFSigner.file(forged, keys: [try SigningKey(contentsOfFile: key("release"))]).write(to: URL(fileURLWithPath: "\(metadata)/timestamp.json"))
        report = try await synced()
        #expect(report["result"] as? String == "up-to-date", "\(report)")
        try real.write(to: URL(fileURLWithPath: "\(metadata)/timestamp.json"))
        report = try await synced()
        #expect(report["errorCode"] as? String == "metadata-replay", "frozen by the forged timestamp: \(report)")

        // Rotation: root 2-of-3 offline keys, one new online key for targets, snapshot and timestamp.
        _ = try await Self.publisher(
            ["root", "propose", "--out", out, "--file", proposal, "--root-threshold", "2", "--targets-key", key("online") + ".pub",
             "--snapshot-key", key("online") + ".pub", "--timestamp-key", key("online") + ".pub"]
                + ["root-a", "root-b", "root-c"].flatMap { ["--root-key", key($0) + ".pub"] })
        // The current root's key signs (old threshold 1) and one of the new three: the new threshold is not met.
        _ = try await Self.publisher(["root", "sign", "--file", proposal, "--key", key("release")])
        _ = try await Self.publisher(["root", "sign", "--file", proposal, "--key", key("root-a")])
        let short = try await CLI.run(["root", "commit", "--out", out, "--file", proposal], executable: CLI.publisher)
        #expect(short.status != 0 && short.stderr.contains("threshold"), "\(short.stderr)")
        #expect(!FileManager.default.fileExists(atPath: "\(metadata)/2.root.json"))
        // Like any device, a device offered it anyway refuses it and keeps its version.
        try FileManager.default.copyItem(atPath: proposal, toPath: "\(metadata)/2.root.json")
        report = try await synced()
        #expect(report["errorCode"] as? String == "root-chain-broken", "\(report)")
        try FileManager.default.removeItem(atPath: "\(metadata)/2.root.json")

        _ = try await Self.publisher(["root", "sign", "--file", proposal, "--key", key("root-b")])
        _ = try await Self.publisher(["root", "commit", "--out", out, "--file", proposal, "--key", key("online")])
        #expect(FileManager.default.fileExists(atPath: "\(metadata)/1.root.json") && FileManager.default.fileExists(atPath: "\(metadata)/2.root.json"))
        #expect(try TUFTimestamp(Data(contentsOf: URL(fileURLWithPath: "\(metadata)/timestamp.json"))).metadata.version < 1_000_000)
        // The device walks to root 2 and drops the forged timestamp (a new timestamp key): unfrozen.
        report = try await synced()
        #expect(report["result"] as? String == "up-to-date", "\(report)")

        // The old key can no longer release; the new online key can, and re-signs everything.
        let stolen = try await CLI.run(["publish", "--version", "1.1.0", "--source", F.sampleApp("1.1.0"), "--key", key("release")] + common,
                                       executable: CLI.publisher)
        #expect(stolen.status != 0 && stolen.stderr.contains("is not the key metadata/2.root.json names"), "\(stolen.stderr)")
        _ = try await Self.publisher(["publish", "--version", "1.1.0", "--source", F.sampleApp("1.1.0"), "--key", key("online")] + common)
        report = try await synced()
        #expect(report["result"] as? String == "updated" && report["version"] as? String == "1.1.0", "\(report)")
        if python {
            let seen = try #require(CLI.json(try await PythonTUF.run("ngclient.py", [server.baseURL, "\(metadata)/1.root.json", dir.file("ngclient"), "sample"])))
            #expect(seen["version"] as? String == "1.1.0", "\(seen)")
        }

        // Root 3 signed by one of the 2-of-3 root keys: refused by commit and by the device.
        let third = dir.file("root-3.json")
        _ = try await Self.publisher(["root", "propose", "--out", out, "--file", third, "--expires", "200d"])
        _ = try await Self.publisher(["root", "sign", "--file", third, "--key", key("root-c")])
        let one = try await CLI.run(["root", "commit", "--out", out, "--file", third], executable: CLI.publisher)
        #expect(one.status != 0 && one.stderr.contains("threshold"), "\(one.stderr)")
        try FileManager.default.copyItem(atPath: third, toPath: "\(metadata)/3.root.json")
        report = try await synced()
        #expect(report["errorCode"] as? String == "root-chain-broken", "\(report)")
        try FileManager.default.removeItem(atPath: "\(metadata)/3.root.json")
        // Two of them: committed, and the device follows.
        _ = try await Self.publisher(["root", "sign", "--file", third, "--key", key("root-a")])
        _ = try await Self.publisher(["root", "commit", "--out", out, "--file", third])
        report = try await synced()
        #expect(report["result"] as? String == "up-to-date", "\(report)")
        await server.stop()
    }
}
