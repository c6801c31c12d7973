import Foundation
import Testing
@testable import OfflineAgent
import TestSupport

/// A failure (an I/O error, `OFFLINE_AGENT_FAIL_AT`) at each step of an install, as the
/// device's own run meets it: the sync fails, the active version is whole, and no object
/// that no version links is left in `objects/`, whichever branch the failure took. The
/// install's transaction collects them; no branch has a call of its own to forget.
@Suite("Install failure at each step", .serialized)
struct InstallFailureTests {
    /// The steps a streamed patch update reaches (as the kill -9 loop), but the manifest's,
    /// which comes before any install and only crashes.
    static let patchPoints = CrashSafetyTests.points.filter { $0 != CrashPoint.afterManifest.rawValue }
    /// The steps a full install reaches: extraction's, not the patch's.
    static let fullPoints = CrashPoint.allCases.filter {
        ![.afterManifest, .afterPatch, .afterPatchObjectWritten, .afterPatchVerified].contains($0) && !CrashPoint.tuf.contains($0)
    }.map(\.rawValue)
    /// Steps after `current` names the new version: the failure comes after the commit point.
    static let afterSwap: Set<String> = [CrashPoint.afterSwap.rawValue, CrashPoint.afterGarbageCollection.rawValue]

    enum Update: String, CaseIterable, Sendable { case patch, full }

    static var cases: [(Update, String)] {
        patchPoints.map { (Update.patch, $0) } + fullPoints.map { (Update.full, $0) }
    }

    @Test("a failure at each step leaves no unlinked object and a whole version; the next sync installs", arguments: cases)
    func failAt(_ update: Update, _ point: String) async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        h.origin.setManifest(update == .patch ? try h.patch(from: "1.0.0", to: "1.1.0") : h.full("1.1.0"))
        let args = ["sync", "--allow-unsigned", "--root", h.root.path, "--app", "mall", "--manifest", h.origin.manifestURL.absoluteString, "--force", "--json"]
        let failed = try await CLI.run(args, environment: ["OFFLINE_AGENT_FAIL_AT": point])
        // The step was reached and failed the sync (not a crash, not a fallback that hid it).
        #expect(!failed.signaled && failed.status != 0, "the sync should fail at \(point): \(failed.stdout) \(failed.stderr)")
        #expect((failed.stdout + failed.stderr).contains(point), "the failure names its step \(point): \(failed.stdout) \(failed.stderr)")
        if Self.afterSwap.contains(point) {
            #expect(h.activeMatches("1.1.0"), "a failure after the swap at \(point) keeps the new version")
        } else {
            #expect(h.activeMatches("1.0.0"), "the old version stays active after a failure at \(point)")
        }
        // What the failed run stored is collected by the run itself, before any next one.
        Self.noUnlinkedObjects(h, after: point)

        let next = try await CLI.run(args)
        #expect(next.status == 0, "\(next.stderr)")
        #expect(h.activeMatches("1.1.0"))
        StreamedPatchTests.noGarbage(h)
    }

    /// Every object in `objects/` is linked by a version's tree (a link count of 2 or more),
    /// and no temporary of the store, a staging tree or a streamed skeleton is left.
    static func noUnlinkedObjects(_ h: SyncHarness, after point: String, sourceLocation: SourceLocation = #_sourceLocation) {
        let objects = h.store.objectsDirectory
        for name in (try? FileManager.default.contentsOfDirectory(atPath: objects)) ?? [] {
            #expect(!name.hasPrefix("."), "leftover \(name) after a failure at \(point)", sourceLocation: sourceLocation)
            #expect((ObjectStoreTests.inode("\(objects)/\(name)")?.links ?? 0) >= 2, "object \(name) is linked by no version after a failure at \(point)",
                    sourceLocation: sourceLocation)
        }
        for dir in [h.store.versionsDirectory("mall"), "\(h.store.appDirectory("mall"))/packages"] {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []
            #expect(names.allSatisfy { !$0.hasPrefix(".") }, "leftovers in \(dir) after a failure at \(point): \(names)", sourceLocation: sourceLocation)
        }
    }
}
