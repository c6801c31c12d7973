import Foundation
import Testing
import TestSupport

/// What `sync` accepts: rollout is decided at use (resolve, status, serve), so sync
/// takes no device id.
@Suite("sync options")
struct SyncOptionsCLITests {
    @Test("sync refuses --device-id as a usage error and installs nothing")
    func noDeviceID() async throws {
        let h = try SyncHarness()
        h.origin.setManifest(h.full("1.0.0"))
        let result = try await CLI.run([
            "sync", "--allow-unsigned", "--root", h.root.path, "--app", "mall", "--manifest", h.origin.manifestURL.absoluteString, "--device-id", "d",
        ])
        #expect(result.status == 64)
        #expect(result.stderr.contains("--device-id"), "\(result.stderr)")
        #expect(h.active == nil)
    }
}
