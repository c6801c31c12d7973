import Foundation
import Testing
@testable import OfflineAgent
import OfflinePublish
import TestSupport

/// Expiry is the classic pain of devices nobody tends: `offline-publish` warns when a
/// publish directory's metadata will run out, and `offline-agent status` shows when the
/// device's trusted metadata does, with a warning in the last eighth of its life (at
/// most 7 days).
@Suite("TUF expiry warnings")
struct TUFExpiryWarningTests {
    typealias F = PublishFixtures

    @Test("the window is an eighth of the life, at most 7 days", arguments: [
        (7 * 86_400.0, 21 * 3_600.0), (365 * 86_400.0, 7 * 86_400.0), (86_400.0, 3 * 3_600.0), (-5.0, 0.0),
    ] as [(Double, Double)])
    func window(lifetime: Double, window: Double) {
        #expect(TUFExpiryNotice.window(lifetime: lifetime) == window)
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let inside = TUFExpiryNotice(role: "timestamp", version: 1, expires: now.addingTimeInterval(window - 1), lifetime: lifetime, now: now)
        let outside = TUFExpiryNotice(role: "timestamp", version: 1, expires: now.addingTimeInterval(window + 1), lifetime: lifetime, now: now)
        #expect(inside.soon && !outside.soon && !outside.expired)
        #expect(inside.describe(now: now).hasPrefix("warning: ") && !outside.describe(now: now).hasPrefix("warning"))
    }

    @Test("offline-publish warns about a timestamp that expires soon; status shows the device's trusted metadata and warns late in its life")
    func warnings() async throws {
        let dir = TemporaryDirectory("tuf-expiry")
        let out = dir.file("publish"), key = dir.file("signing.key"), root = dir.file("device")
        #expect(try await CLI.run(["keygen", "--out", key], executable: CLI.publisher).status == 0)
        let publish = try await CLI.run(
            ["publish", "--app", "mall", "--version", "1.0.0", "--source", F.sampleApp("1.0.0"), "--out", out,
             "--whitelist", "https://h5.example.com/mall/", "--key", key], executable: CLI.publisher)
        #expect(publish.status == 0 && !publish.stderr.contains("warning"), "fresh metadata warns of nothing: \(publish.stderr)")
        // 12 hours left of a 7-day timestamp: inside its last 21 hours.
        let short = try await CLI.run(["timestamp", "--out", out, "--key", key, "--expires", "12h"], executable: CLI.publisher)
        #expect(short.status == 0 && short.stderr.contains("warning: timestamp v2 expires"), "\(short.stderr)")
        #expect(!short.stderr.contains("root v1"), "\(short.stderr)")

        let server = try await OfflineServerProcess(arguments: ["--dir", out, "--no-reports"])
        let sync = try await CLI.run(["sync", "--root", root, "--app", "mall", "--manifest", "\(server.baseURL)/mall/manifest.json",
                                      "--trusted-root", "\(out)/metadata/1.root.json", "--force", "--json"])
        #expect(sync.status == 0, "\(sync.stdout) \(sync.stderr)")
        await server.stop()

        func timestamp(_ json: [String: Any]?) -> [String: Any]? {
            let trust = json?["trust"] as? [[String: Any]]
            return (trust?.first?["roles"] as? [[String: Any]])?.first { $0["role"] as? String == "timestamp" }
        }
        // Just accepted with 12 hours to go: its life is those 12 hours, not yet in the last eighth.
        var status = try await CLI.run(["status", "--root", root, "--app", "mall", "--json"])
        var role = try #require(timestamp(CLI.json(status.stdout)), "\(status.stdout)")
        #expect(role["soon"] as? Bool == false && role["version"] as? Int == 2, "\(role)")
        // Accepted a week ago (the device has not reached the repository since): warned.
        let stored = try #require(FileManager.default.enumerator(atPath: "\(root)/tuf")?.allObjects.compactMap { $0 as? String }
            .first { $0.hasSuffix("/timestamp.json") })
        try FileManager.default.setAttributes([.modificationDate: Date().addingTimeInterval(-7 * 86_400)], ofItemAtPath: "\(root)/tuf/\(stored)")
        status = try await CLI.run(["status", "--root", root, "--json"])
        role = try #require(timestamp(CLI.json(status.stdout)), "\(status.stdout)")
        #expect(role["soon"] as? Bool == true && role["expired"] as? Bool == false, "\(role)")
        let text = try await CLI.run(["status", "--root", root])
        #expect(text.stdout.contains("trusted metadata ") && text.stdout.contains("warning: timestamp v2 expires"), "\(text.stdout)")
    }
}
