import Foundation
import OfflineAgent
import Testing
import TestSupport

/// What `sync` accepts.
@Suite("sync options")
struct SyncOptionsCLITests {
    /// Issue 39, surprise 9: a fleet is simulated with one root and `--device-id`, as the
    /// library's `SyncOptions.deviceID` allows; the id places the device in a staged rollout.
    @Test("sync --device-id places the device in a staged rollout by that id, not the root's own")
    func deviceID() async throws {
        let h = try SyncHarness()
        let ids = (0..<1000).map { "device-\($0)" }
        let inside = try #require(ids.first { Resolver.rolloutBucket(deviceID: $0, app: "mall") <= 50 })
        let outside = try #require(ids.first { Resolver.rolloutBucket(deviceID: $0, app: "mall") > 50 })
        h.origin.setManifest(h.full("1.0.0", ["stage": 50]))
        func sync(_ id: String) async throws -> CLI.Result {
            try await CLI.run([
                "sync", "--allow-unsigned", "--root", h.root.path, "--app", "mall", "--manifest", h.origin.manifestURL.absoluteString,
                "--force", "--json", "--device-id", id,
            ])
        }
        let out = try await sync(outside)
        #expect(out.status == 0, "\(out.stderr)")
        #expect(CLI.json(out.stdout)?["result"] as? String == "not-in-stage", "\(out.stdout)")
        #expect(h.active == nil)
        let into = try await sync(inside)
        #expect(CLI.json(into.stdout)?["result"] as? String == "updated", "\(into.stdout) \(into.stderr)")
        #expect(h.active?.description == "1.0.0")
        // The root's own id was never needed.
        #expect(!FileManager.default.fileExists(atPath: "\(h.root.path)/device-id"))
    }
}
