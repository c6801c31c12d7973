import Foundation
import Testing
@testable import OfflineAgent
@testable import OfflinePublish
import TestSupport

/// `kill -9` between any two writes of the TUF metadata store (issue 37): a rotated
/// root kept, a timestamp kept before its snapshot, a snapshot before its targets,
/// targets before the manifest, an app's delegated role before the manifest. Afterwards the device never trusts an older timestamp
/// than it had, keeps its installed version whole, and the next sync updates.
@Suite("TUF crash safety", .serialized)
struct TUFCrashTests {
    typealias F = PublishFixtures

    static func timestampVersion(_ root: String) -> Int64? {
        let files = FileManager.default.enumerator(atPath: "\(root)/tuf")?.allObjects.compactMap { $0 as? String } ?? []
        return files.first { $0.hasSuffix("/timestamp.json") }
            .flatMap { FileManager.default.contents(atPath: "\(root)/tuf/\($0)") }
            .flatMap { try? TUFTimestamp($0).metadata.version }
    }

    @Test("kill -9 at each write of the metadata store: no older timestamp, the version whole, the next sync updates",
          arguments: CrashPoint.tuf.map(\.rawValue))
    func killAt(_ point: String) async throws {
        let dir = TemporaryDirectory("tuf-crash")
        let out = dir.file("publish"), root = dir.file("device")
        let key = SigningKey.generate()
        // At the delegated point the app has a role of its own, signed by its own key.
        let delegated = point == CrashPoint.afterTUFDelegated.rawValue
        let appKey = SigningKey.generate()
        func publish(_ version: String) throws {
            var options = PublishOptions(
                app: "mall", version: Version(version)!, sourceDirectory: F.sampleApp(version), publishDirectory: out,
                whitelist: ["https://h5.example.com/mall/"], signingKey: delegated && version != "1.0.0" ? appKey : key)
            options.snapshotKey = key
            options.now = Date()
            _ = try Publisher.publish(options)
        }
        try publish("1.0.0")
        if delegated {
            try TUFRepository.delegate(
                app: "mall", publishDirectory: out, appKey: appKey, keys: TUFKeys(targets: [key], snapshot: [key], timestamp: [key]), now: Date())
        }
        let server = try await OfflineServerProcess(arguments: ["--dir", out, "--no-reports"])
        let sync = ["sync", "--root", root, "--app", "mall", "--manifest", "\(server.baseURL)/mall/manifest.json",
                    "--trusted-root", "\(out)/metadata/1.root.json", "--force", "--json"]
        let first = try await CLI.run(sync)
        #expect(first.status == 0, "\(first.stderr)")
        let before = try #require(Self.timestampVersion(root))

        try publish("1.1.0")
        if point == CrashPoint.afterTUFRoot.rawValue {
            // A root renewal for the device to keep: propose, sign, commit.
            let proposal = dir.file("root-2.json")
            try TUFRootRotation.propose(publishDirectory: out, file: proposal, changes: [:], expires: Date().addingTimeInterval(300 * 86_400))
            try TUFRootRotation.sign(file: proposal, key: key)
            try TUFRootRotation.commit(publishDirectory: out, file: proposal)
        }
        let crashed = try await CLI.run(sync, environment: ["OFFLINE_AGENT_CRASH_AT": point])
        #expect(crashed.signaled && crashed.status == SIGKILL, "the process should die at \(point): \(crashed.stderr)")
        #expect(try #require(Self.timestampVersion(root)) >= before, "an older timestamp after a crash at \(point)")
        let serving = try await CLI.run(["status", "--root", root, "--app", "mall", "--json"])
        #expect(CLI.json(serving.stdout)?["version"] as? String == "1.0.0" && CLI.json(serving.stdout)?["usable"] as? Bool == true,
                "\(serving.stdout)")

        let next = try #require(CLI.json(try await CLI.run(sync).stdout))
        #expect(next["result"] as? String == "updated" && next["version"] as? String == "1.1.0", "after a crash at \(point): \(next)")
        #expect(try #require(Self.timestampVersion(root)) > before)
        await server.stop()
    }
}
