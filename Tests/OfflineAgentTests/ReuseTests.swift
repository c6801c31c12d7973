import Foundation
import Testing
@testable import OfflineAgent
import TestSupport

/// A verified package a local failure left behind is installed from disk; a package
/// refused for its content is remembered by its SHA-256 and not downloaded again;
/// `bytesDownloaded` counts what arrived, also when the sync fails.
@Suite("Reuse and refusal memory", .serialized)
struct ReuseTests {
    /// How the new version is offered.
    enum Kind: String, CaseIterable, CustomTestStringConvertible {
        case full, gzip, patch
        var testDescription: String { rawValue }
    }

    /// Offers 1.1.0 as `kind` (1.0.0 must be installed for a patch); returns the file paths it may request.
    static func offer(_ kind: Kind, _ h: SyncHarness) throws -> (paths: [String], downloadSize: Int, decoded: Bool) {
        let zip = h.fixture.bytes("1.1.0")
        switch kind {
        case .full:
            h.origin.setManifest(h.full("1.1.0"))
            return (["/files/1.1.0.zip"], zip.count, false)
        case .gzip:
            let gz = try PackageFixture.gzip(zip)
            h.origin.put("1.1.0.zip.gz", gz)
            h.origin.setManifest(h.full("1.1.0", [
                "url": "files/1.1.0.zip.gz", "size": gz.count, "sha256": PackageFixture.sha256(gz), "compression": "gzip",
            ]))
            return (["/files/1.1.0.zip.gz"], gz.count, true)
        case .patch:
            let manifest = try h.patch(from: "1.0.0", to: "1.1.0")
            h.origin.setManifest(manifest)
            return (["/files/1.0.0-1.1.0.bsdiff", "/files/1.1.0.zip"], manifest["size"] as! Int, true)
        }
    }

    static func count(_ h: SyncHarness, _ paths: [String]) -> Int { paths.reduce(0) { $0 + h.origin.requests(for: $1).count } }

    // MARK: - Reuse

    @Test("kill -9 after the package was verified: the next sync installs it from disk, downloading nothing",
          arguments: [Kind.gzip, .patch, .full], ["during-extract", "after-extract"])
    func reuseAfterKill(_ kind: Kind, _ point: String) async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        let (paths, _, _) = try Self.offer(kind, h)
        let args = ["sync", "--allow-unsigned", "--root", h.root.path, "--app", "mall", "--manifest", h.origin.manifestURL.absoluteString, "--force", "--json"]
        let crashed = try await CLI.run(args, environment: ["OFFLINE_AGENT_CRASH_AT": point])
        #expect(crashed.signaled && crashed.status == SIGKILL, "\(crashed.stderr)")
        #expect(h.activeMatches("1.0.0"))
        let before = Self.count(h, paths)

        let next = await h.sync()
        #expect(next.result == .updated, "\(next.error?.description ?? "")")
        #expect(Self.count(h, paths) == before, "no file requested again")
        #expect(next.bytesDownloaded == 0)
        #expect(h.activeMatches("1.1.0"))
        #expect(try FileManager.default.contentsOfDirectory(atPath: h.store.downloadsDirectory("mall")).isEmpty)
    }

    @Test("disk full during extraction, then room again: installed from disk, byte for byte", arguments: Kind.allCases)
    func reuseAfterDiskFull(_ kind: Kind) async throws {
        guard let disk = CrashSafetyTests.SmallDisk(megabytes: 2) else {
            Issue.record("cannot mount a tmpfs here (needs root/CAP_SYS_ADMIN)")
            return
        }
        let h = try SyncHarness()
        let root = "\(disk.path)/root"
        let agent = { Agent(root: URL(fileURLWithPath: root), configuration: h.configuration) }
        let options = SyncOptions(force: true)
        h.origin.setManifest(h.full("1.0.0"))
        #expect(await agent().sync(app: "mall", manifest: h.origin.manifestURL, options: options).result == .updated)
        let (paths, downloadSize, decoded) = try Self.offer(kind, h)
        let filler = "\(disk.path)/filler"
        let zipSize = h.fixture.bytes("1.1.0").count
        // The disk fills after the budget check: room for the download (and its decoded
        // or patched package), not for the extraction.
        let name = String(paths[0].dropFirst("/files/".count))
        h.origin.override(name) { request, bytes in
            let free = FileSystem.availableBytes(at: disk.path) ?? 0
            let room = Int64(downloadSize + (decoded ? zipSize : 0) + 16 * 1024)
            _ = try? runOnThisThread("fallocate", ["-l", "\(max(free - room, 4096))", filler])  // blocking: the origin's thread
            return Origin.serve(bytes, request: request)
        }
        let failed = await agent().sync(app: "mall", manifest: h.origin.manifestURL, options: options)
        #expect(failed.result == .failed)
        #expect(failed.error?.cause == .diskFull, "\(failed.error?.description ?? "")")
        #expect(failed.bytesDownloaded == Int64(downloadSize))
        #expect(Store(root: root).active("mall")?.version.description == "1.0.0")
        let before = Self.count(h, paths)

        FileSystem.remove(filler)
        h.origin.clearOverrides()
        let healed = await agent().sync(app: "mall", manifest: h.origin.manifestURL, options: options)
        #expect(healed.result == .updated, "\(healed.error?.description ?? "")")
        #expect(Self.count(h, paths) == before, "zero file requests")
        #expect(healed.bytesDownloaded == 0)
        #expect(CrashSafetyTests.tree(of: "\(root)/apps/mall/versions/1.1.0", equals: "\(Repo.fixtures)/sample-app/1.1.0"))
    }

    /// Not a patch: a streamed patch update keeps no package, only the patch (StreamedPatchTests).
    @Test("a kept package altered on disk is deleted and downloaded afresh", arguments: [Kind.gzip, .full])
    func tamperedKeptPackage(_ kind: Kind) async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        let (paths, _, _) = try Self.offer(kind, h)
        let args = ["sync", "--allow-unsigned", "--root", h.root.path, "--app", "mall", "--manifest", h.origin.manifestURL.absoluteString, "--force"]
        _ = try await CLI.run(args, environment: ["OFFLINE_AGENT_CRASH_AT": "after-extract"])
        let kept = "\(h.store.downloadsDirectory("mall"))/\(PackageFixture.sha256(h.fixture.bytes("1.1.0")))"
        var bytes = try #require(FileManager.default.contents(atPath: kept), "the verified package is kept")
        bytes[bytes.count / 2] ^= 0xFF
        try bytes.write(to: URL(fileURLWithPath: kept))
        let before = h.origin.requests(for: paths[0]).count

        let report = await h.sync()
        #expect(report.result == .updated, "\(report.error?.description ?? "")")
        #expect(h.origin.requests(for: paths[0]).count == before + 1, "downloaded again")
        #expect(report.bytesDownloaded > 0)
        #expect(h.activeMatches("1.1.0"))
    }

    // MARK: - Refusals

    enum Refusal: String, CaseIterable, CustomTestStringConvertible {
        case hostile, corrupt, patchAndFullMismatch
        var testDescription: String { rawValue }
    }

    /// Offers a 1.1.0 the agent refuses for its content; returns the expected cause and the paths it may request.
    static func offerRefused(_ refusal: Refusal, _ h: SyncHarness) throws -> (cause: OfflineAgentError.Cause, paths: [String], size: Int) {
        switch refusal {
        case .hostile, .corrupt:
            var zip = ZipBuilder()
            zip.file("index.html", "<p>bad</p>")
            if refusal == .hostile {
                zip.file("../escape.txt", "out")
            } else {
                zip.entries[0].crc ^= 0xFFFF
            }
            let bytes = zip.build()
            h.origin.put("bad.zip", bytes)
            let sha = PackageFixture.sha256(bytes)
            h.origin.setManifest(h.full("1.1.0", ["url": "files/bad.zip", "size": bytes.count, "sha256": sha, "packageSha256": sha]))
            return (refusal == .hostile ? .hostileArchive : .archiveCorrupt, ["/files/bad.zip"], bytes.count)
        case .patchAndFullMismatch:
            // Published wrong: the patch makes 1.1.0, the full file is 1.1.0, packageSha256 names other bytes.
            let manifest = try h.patch(from: "1.0.0", to: "1.1.0", ["packageSha256": PackageFixture.sha256(h.fixture.bytes("1.2.0"))])
            h.origin.setManifest(manifest)
            // Both files arrive whole before they are refused.
            return (.hashMismatch, ["/files/1.0.0-1.1.0.bsdiff", "/files/1.1.0.zip"], (manifest["size"] as! Int) + h.fixture.bytes("1.1.0").count)
        }
    }

    @Test("a package refused for its content is not downloaded again; other bytes are", arguments: Refusal.allCases)
    func refusedIsRemembered(_ refusal: Refusal) async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        let (cause, paths, size) = try Self.offerRefused(refusal, h)
        let first = await h.sync()
        #expect(first.result == .failed)
        #expect(first.error?.cause == cause, "\(first.error?.description ?? "")")
        #expect(first.bytesDownloaded == Int64(size), "a failed patch and a failed full are both counted")
        let before = Self.count(h, paths)
        #expect(before > 0)

        let second = await h.sync()
        #expect(second.result == .failed)
        #expect(second.error?.cause == cause, "\(second.error?.description ?? "")")
        #expect(second.error?.code == first.error?.code)
        #expect(second.error?.reason.contains("refused before") == true, "\(second.error?.description ?? "")")
        #expect(Self.count(h, paths) == before, "nothing downloaded")
        #expect(second.bytesDownloaded == 0)
        #expect(h.activeMatches("1.0.0"))

        // The same version with fixed bytes (it was never installed) downloads and installs.
        h.origin.setManifest(h.full("1.1.0"))
        let fixed = await h.sync()
        #expect(fixed.result == .updated, "\(fixed.error?.description ?? "")")
        #expect(fixed.bytesDownloaded == Int64(h.fixture.bytes("1.1.0").count))
        #expect(h.activeMatches("1.1.0"))
    }

    @Test("the refusal record stays bounded")
    func refusalRecordBounded() throws {
        let h = try SyncHarness()
        try h.store.prepare("mall")
        for index in 0..<(RefusedPackages.limit + 5) {
            let sha = PackageFixture.sha256(Array("\(index)".utf8))
            let manifest = Manifest(app: "mall", version: try #require(Version("1.0.\(index)")), miniVersion: try #require(Version("1.0.0")), isPatch: false,
                                    url: "files/x.zip", size: 1, sha256: sha, packageSha256: sha, whitelist: [SyncHarness.whitelist], rollout: 100)
            RefusedPackages.remember(h.store, app: "mall", manifest: manifest,
                                     error: OfflineAgentError(.extract, "bad", cause: .hostileArchive), fileHashBound: false)
        }
        let record = RefusedPackages.load(h.store, app: "mall")
        #expect(record.entries.count == RefusedPackages.limit)
        #expect(record.entries.last?.version == "1.0.\(RefusedPackages.limit + 4)")
    }

    enum Transport: String, CaseIterable, CustomTestStringConvertible {
        case status500, reset, timeout
        var testDescription: String { rawValue }
    }

    @Test("transport failures are never remembered as refusals", arguments: Transport.allCases)
    func transportNotRemembered(_ failure: Transport) async throws {
        let h = try SyncHarness()
        h.configuration.network.readTimeout = .seconds(1)
        try await h.install("1.0.0")
        h.origin.setManifest(h.full("1.1.0"))
        h.origin.override("1.1.0.zip") { _, bytes in
            switch failure {
            case .status500: return .status(500)
            case .reset: return ScriptedServer.Reply(status: 200, body: bytes, ending: .reset(afterBodyBytes: bytes.count / 2))
            case .timeout: return ScriptedServer.Reply(status: 200, body: bytes, ending: .stall(seconds: 5))
            }
        }
        let failed = await h.sync()
        #expect(failed.result == .failed)
        #expect([.httpStatus, .network, .timeout, .protocolViolation].contains(failed.error?.cause), "\(failed.error?.description ?? "")")
        #expect(!FileManager.default.fileExists(atPath: RefusedPackages.path(h.store, app: "mall")))
        h.origin.clearOverrides()
        let before = h.origin.requests(for: "/files/1.1.0.zip").count
        let next = await h.sync()
        #expect(next.result == .updated, "\(next.error?.description ?? "")")
        #expect(h.origin.requests(for: "/files/1.1.0.zip").count > before)
        #expect(h.activeMatches("1.1.0"))
    }

    // MARK: - Counting

    enum Sent: String, CaseIterable, CustomTestStringConvertible {
        case truncated, hashMismatch, hostile
        var testDescription: String { rawValue }
    }

    @Test("bytesDownloaded on a failed sync equals what the server sent, also in sync --json", arguments: Sent.allCases)
    func bytesCountedOnFailure(_ sent: Sent) async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        let package = h.fixture.bytes("1.1.0")
        let expected: Int
        switch sent {
        case .truncated:
            expected = package.count / 3
            h.origin.setManifest(h.full("1.1.0"))
            h.origin.override("1.1.0.zip") { _, bytes in
                ScriptedServer.Reply(status: 200, body: bytes, ending: .close(afterBodyBytes: expected))
            }
        case .hashMismatch:
            expected = package.count
            h.origin.setManifest(h.full("1.1.0"))
            h.origin.override("1.1.0.zip") { _, bytes in .ok(bytes.map { $0 ^ 0x5A }) }
        case .hostile:
            expected = try Self.offerRefused(.hostile, h).size
        }
        let args = ["sync", "--allow-unsigned", "--root", h.root.path, "--app", "mall", "--manifest", h.origin.manifestURL.absoluteString, "--force", "--json"]
        let result = try await CLI.run(args)
        #expect(result.status != 0)
        let json = try #require(CLI.json(result.stdout), "\(result.stdout) \(result.stderr)")
        #expect(json["result"] as? String == "failed")
        #expect((json["bytesDownloaded"] as? NSNumber)?.intValue == expected, "\(json)")
        #expect(h.activeMatches("1.0.0"))
    }
}
