import Foundation
import Testing
@testable import OfflineAgent
import TestSupport

/// `kill -9` at every step of an install, two runs at once, a full disk, a
/// read-only root: afterwards the active version is entirely old or entirely new,
/// and the next sync completes.
@Suite("Crash safety", .serialized)
struct CrashSafetyTests {
    /// Every step a patch update reaches. Extraction's object writes (`after-object-written`,
    /// `after-object-stored`) are a full install's: ObjectStoreTests kills there.
    /// The TUF metadata store's points are a trusted-root sync's: TUFCrashTests kills there.
    static let points = CrashPoint.allCases.filter { ![.afterObjectWritten, .afterObjectStored].contains($0) && !CrashPoint.tuf.contains($0) }
        .map(\.rawValue)
    /// The steps of a streamed patch update before its swap: a crash there leaves the old version active.
    static let beforeSwap: Set<String> = Set([CrashPoint.afterPatchObjectWritten, .afterPatch, .afterPatchVerified, .afterObjectLinked,
                                              .beforeTreeRename, .afterExtract].map(\.rawValue))

    @Test("kill -9 at each install step leaves old or new, and the next sync completes", arguments: points)
    func killAt(_ point: String) async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        h.origin.setManifest(try h.patch(from: "1.0.0", to: "1.1.0"))
        let args = ["sync", "--allow-unsigned", "--root", h.root.path, "--app", "mall", "--manifest", h.origin.manifestURL.absoluteString, "--force", "--json"]
        let crashed = try await CLI.run(args, environment: ["OFFLINE_AGENT_CRASH_AT": point])
        #expect(crashed.signaled && crashed.status == SIGKILL, "the process should die at \(point): \(crashed.stderr)")
        #expect(h.activeMatches("1.0.0") || h.activeMatches("1.1.0"), "active version is whole after a crash at \(point)")
        if Self.beforeSwap.contains(point) { #expect(h.activeMatches("1.0.0"), "the old version stays active after a crash at \(point)") }
        // Readers see a whole version the whole time.
        let index = try await h.served("index.html")
        let whole = index == h.expected("1.0.0", "index.html") || index == h.expected("1.1.0", "index.html")
        #expect(whole)

        let next = try await CLI.run(args)
        #expect(next.status == 0, "\(next.stderr)")
        let json = try #require(CLI.json(next.stdout))
        #expect(json["version"] as? String == "1.1.0")
        #expect(h.activeMatches("1.1.0"))
        // No leftovers of the crashed run.
        let versions = try FileManager.default.contentsOfDirectory(atPath: h.store.versionsDirectory("mall"))
        #expect(versions.filter { $0.hasPrefix(".") }.isEmpty, "\(versions)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: h.store.appDirectory("mall")).filter { $0.hasPrefix(".") }.isEmpty)
        StreamedPatchTests.noGarbage(h)
        #expect(Self.tree(of: h.store.versionDirectory("mall", Version("1.0.0")!), equals: "\(Repo.fixtures)/sample-app/1.0.0"),
                "the kept old version is whole")
    }

    @Test("kill -9 at random moments of slow syncs, then a clean finish")
    func killAtRandomMoments() async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        h.origin.slow("1.3.0.zip", chunk: 4096, pause: 0.01)
        h.origin.setManifest(h.full("1.3.0"))
        let args = ["sync", "--allow-unsigned", "--root", h.root.path, "--app", "mall", "--manifest", h.origin.manifestURL.absoluteString, "--force"]
        var generator = SplitMix64(seed: 42)
        for _ in 0..<6 {
            let running = try CLI.start(args)
            try await Task.sleep(for: .seconds(Double.random(in: 0.05...0.6, using: &generator)))
            kill(running.process.processIdentifier, SIGKILL)
            _ = await CLI.finish(running)
            #expect(h.activeMatches("1.0.0") || h.activeMatches("1.3.0"))
        }
        h.origin.clearOverrides()
        let last = try await CLI.run(args)
        #expect(last.status == 0, "\(last.stderr)")
        #expect(h.activeMatches("1.3.0"))
    }

    @Test("two syncs at once: one installs, the other exits 75")
    func concurrentSyncs() async throws {
        let h = try SyncHarness()
        h.origin.setManifest(h.full("1.0.0"))
        let args = ["sync", "--allow-unsigned", "--root", h.root.path, "--app", "mall", "--manifest", h.origin.manifestURL.absoluteString, "--force", "--json"]
        // The first one holds the root's lock at its pause point (after its download) until the
        // second has run: no race with the machine's speed.
        let scratch = TemporaryDirectory("pause")
        let pause = scratch.file("pause")
        let first = try CLI.start(args, environment: ["OFFLINE_AGENT_PAUSE_AT": "after-download", "OFFLINE_AGENT_PAUSE_FILE": pause])
        // Bounded (5 minutes): a sync that never gets there, not a slow one.
        for _ in 0..<3000 where first.process.isRunning && !FileManager.default.fileExists(atPath: pause) {
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(FileManager.default.fileExists(atPath: pause), "the first sync reached its download's end")
        let second = try await CLI.run(args)
        try? FileManager.default.removeItem(atPath: pause)
        #expect(second.status == 75, "\(second.stderr)")
        #expect(CLI.json(second.stdout)?["result"] as? String == "failed")
        let done = await CLI.finish(first)
        #expect(done.status == 0, "\(done.stderr)")
        #expect(h.activeMatches("1.0.0"))
    }

    @Test("two agents in one process: the second finds the root busy")
    func busyInProcess() async throws {
        let h = try SyncHarness()
        // The package is answered only once the second sync has ended: the first holds the
        // root meanwhile, however fast or slow the machine.
        let gate = DispatchSemaphore(value: 0)
        h.origin.override("1.0.0.zip") { request, bytes in
            _ = gate.wait(timeout: .now() + 300)  // blocking: the origin's thread; the bound ends a test that never opens it
            return Origin.serve(bytes, request: request)
        }
        h.origin.setManifest(h.full("1.0.0"))
        async let first = h.sync()
        await h.origin.waitForRequest("/files/1.0.0.zip")
        let second = await h.sync()
        gate.signal()
        #expect(second.result == .failed)
        #expect(second.error?.code == .busy)
        #expect(await first.result == .updated)
    }

    /// Mounts a small tmpfs for disk-full tests; nil (with a reason) where mounting is not allowed.
    final class SmallDisk: Sendable {
        let path: String
        init?(megabytes: Int) {
            let dir = TemporaryDirectory("tmpfs")
            path = dir.path + "-mnt"
            try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            guard (try? runOnThisThread("mount", ["-t", "tmpfs", "-o", "size=\(megabytes)m", "tmpfs", path]))?.status == 0 else { return nil }  // blocking: a tmpfs mount, a moment
        }
        func remount(readOnly: Bool) async -> Bool {
            (try? await run("mount", ["-o", "remount,\(readOnly ? "ro" : "rw")", path]))?.status == 0
        }
        deinit {
            _ = try? runOnThisThread("umount", ["-l", path])  // blocking: a lazy unmount, a moment
            try? FileManager.default.removeItem(atPath: path)
        }
    }

    @Test("disk full during download, then during extraction: clear errors, old version intact, recovery")
    func diskFull() async throws {
        guard let disk = SmallDisk(megabytes: 2) else {
            Issue.record("cannot mount a tmpfs here (needs root/CAP_SYS_ADMIN)")
            return
        }
        let h = try SyncHarness()
        let root = "\(disk.path)/root"
        let agent = { Agent(root: URL(fileURLWithPath: root), configuration: h.configuration) }
        h.origin.setManifest(h.full("1.0.0"))
        #expect(await agent().sync(app: "mall", manifest: h.origin.manifestURL, options: SyncOptions(force: true)).result == .updated)
        let filler = "\(disk.path)/filler"
        let package = h.fixture.bytes("1.1.0")
        // The disk fills up after the budget check, while the file is being written.
        h.origin.override("1.1.0.zip") { request, bytes in
            let free = FileSystem.availableBytes(at: disk.path) ?? 0
            _ = try? runOnThisThread("fallocate", ["-l", "\(max(free - Int64(bytes.count) / 2, 4096))", filler])  // blocking: the origin's thread
            return Origin.serve(bytes, request: request)
        }
        h.origin.setManifest(h.full("1.1.0"))
        let during = await agent().sync(app: "mall", manifest: h.origin.manifestURL, options: SyncOptions(force: true))
        #expect(during.result == .failed)
        #expect(during.error?.code == .download)
        #expect(during.error?.cause == .diskFull, "\(during.error?.description ?? "")")
        #expect(during.error?.description.contains("disk full") == true, "\(during.error?.description ?? "")")
        #expect(Store(root: root).active("mall")?.version.description == "1.0.0")

        // Room for the download but not for the extraction.
        FileSystem.remove(filler)
        FileSystem.remove(Store(root: root).downloadsDirectory("mall"))
        try FileManager.default.createDirectory(atPath: Store(root: root).downloadsDirectory("mall"), withIntermediateDirectories: true)
        h.origin.override("1.1.0.zip") { request, bytes in
            let free = FileSystem.availableBytes(at: disk.path) ?? 0
            _ = try? runOnThisThread("fallocate", ["-l", "\(max(free - Int64(bytes.count) - 16 * 1024, 4096))", filler])  // blocking: the origin's thread
            return Origin.serve(bytes, request: request)
        }
        let extracting = await agent().sync(app: "mall", manifest: h.origin.manifestURL, options: SyncOptions(force: true))
        #expect(extracting.result == .failed)
        // The download fitted: the failure is the extraction's, for want of space.
        #expect(h.origin.requests(for: "/files/1.1.0.zip").count >= 2)
        #expect([.extract, .install].contains(extracting.error?.code), "\(extracting.error?.description ?? "")")
        #expect(extracting.error?.cause == .diskFull, "\(extracting.error?.description ?? "")")
        #expect(Self.tree(of: "\(root)/apps/mall/versions/1.0.0", equals: "\(Repo.fixtures)/sample-app/1.0.0"), "the old version is intact byte for byte")
        #expect(Store(root: root).active("mall")?.version.description == "1.0.0")
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: "\(root)/apps/mall/versions").filter { $0.hasPrefix(".") }
        #expect(leftovers.isEmpty, "no staging directory left: \(leftovers)")

        FileSystem.remove(filler)
        h.origin.clearOverrides()
        let healed = await agent().sync(app: "mall", manifest: h.origin.manifestURL, options: SyncOptions(force: true))
        #expect(healed.result == .updated, "\(healed.error?.description ?? "")")
        #expect(Self.tree(of: "\(root)/apps/mall/versions/1.1.0", equals: "\(Repo.fixtures)/sample-app/1.1.0"))
        _ = package
    }

    /// True when `path` holds exactly the files of `source`, byte for byte.
    static func tree(of path: String, equals source: String) -> Bool {
        guard TestSupport.tree(path) == TestSupport.tree(source) else { return false }
        return TestSupport.tree(source).allSatisfy { name in
            FileSystem.isDirectory("\(source)/\(name)")
                || FileManager.default.contents(atPath: "\(source)/\(name)") == FileManager.default.contents(atPath: "\(path)/\(name)")
        }
    }

    @Test("not enough space for the plan: refused before downloading")
    func diskBudget() async throws {
        guard let disk = SmallDisk(megabytes: 1) else {
            Issue.record("cannot mount a tmpfs here")
            return
        }
        let h = try SyncHarness()
        let big = [UInt8](repeating: 7, count: 900_000)
        var zip = ZipBuilder()
        zip.file("big.bin", big)
        let bytes = zip.build()
        h.origin.put("big.zip", bytes)
        h.origin.setManifest(h.full("1.0.0", ["url": "files/big.zip", "size": bytes.count,
                                               "sha256": PackageFixture.sha256(bytes), "packageSha256": PackageFixture.sha256(bytes)]))
        let report = await Agent(root: URL(fileURLWithPath: "\(disk.path)/root"), configuration: h.configuration)
            .sync(app: "mall", manifest: h.origin.manifestURL, options: SyncOptions(force: true))
        #expect(report.result == .failed)
        #expect(report.error?.reason.contains("not enough disk space") == true, "\(report.error?.description ?? "")")
        #expect(h.origin.requests(for: "/files/big.zip").isEmpty)
    }

    @Test("a read-only root fails clearly and keeps the installed version")
    func readOnlyRoot() async throws {
        guard let disk = SmallDisk(megabytes: 4) else {
            Issue.record("cannot mount a tmpfs here")
            return
        }
        let h = try SyncHarness()
        let root = URL(fileURLWithPath: "\(disk.path)/root")
        h.origin.setManifest(h.full("1.0.0"))
        #expect(await Agent(root: root, configuration: h.configuration).sync(app: "mall", manifest: h.origin.manifestURL, options: SyncOptions(force: true)).result == .updated)
        #expect(await disk.remount(readOnly: true))
        h.origin.setManifest(h.full("1.1.0"))
        let report = await Agent(root: root, configuration: h.configuration).sync(app: "mall", manifest: h.origin.manifestURL, options: SyncOptions(force: true))
        #expect(report.result == .failed)
        #expect(report.error?.description.contains("Read-only file system") == true, "\(report.error?.description ?? "")")
        #expect(report.error?.cause == .io, "\(report.error?.description ?? "")")
        #expect(Store(root: root.path).active("mall")?.version.description == "1.0.0")
        #expect(Self.tree(of: "\(root.path)/apps/mall/versions/1.0.0", equals: "\(Repo.fixtures)/sample-app/1.0.0"), "old version byte for byte")
        #expect(await disk.remount(readOnly: false))
    }
}
