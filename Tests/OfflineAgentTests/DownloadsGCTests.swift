import Foundation
import Testing
@testable import OfflineAgent
import TestSupport

/// `downloads/` keeps only what the current plan needs: partials of versions no
/// longer offered, refused packages and strays go under the lock, the partial of the
/// file now offered stays and resumes; `status` shows the bytes each app keeps.
@Suite("Downloads garbage collection")
struct DownloadsGCTests {
    struct Case: CustomTestStringConvertible, Sendable {
        var label: String
        /// Puts files in `downloads/` after 1.0.0 is installed.
        var plant: @Sendable (SyncHarness, String) throws -> Void
        /// The manifest offered next.
        var offer: @Sendable (SyncHarness) throws -> [String: Any]
        /// When true the offered file answers 500, so the sync fails after the manifest.
        var failDownload = false
        var result: SyncResult
        /// What `downloads/` must hold afterwards.
        var remaining: @Sendable (SyncHarness) -> Set<String> = { _ in [] }
        var testDescription: String { label }
    }

    static func sha(_ h: SyncHarness, _ version: String) -> String { PackageFixture.sha256(h.fixture.bytes(version)) }

    /// A resumable partial of `version`'s full package, as the downloader leaves one.
    static func plantPartial(_ h: SyncHarness, _ dir: String, _ version: String) throws {
        let bytes = h.fixture.bytes(version)
        let part = "\(dir)/\(sha(h, version)).part"
        try Data(bytes[0..<(bytes.count / 2)]).write(to: URL(fileURLWithPath: part))
        let info = ["url": h.origin.fileURL("\(version).zip")]
        try JSONEncoder().encode(info).write(to: URL(fileURLWithPath: part + ".json"))
    }

    static let cases: [Case] = [
        Case(label: "partial of a version no longer offered", plant: { h, dir in try plantPartial(h, dir, "1.1.0") },
             offer: { h in h.full("1.2.0") }, failDownload: true, result: .failed),
        Case(label: "complete download of a version no longer offered", plant: { h, dir in
            try Data(h.fixture.bytes("1.1.0")).write(to: URL(fileURLWithPath: "\(dir)/\(sha(h, "1.1.0"))"))
        }, offer: { h in h.full("1.2.0") }, failDownload: true, result: .failed),
        Case(label: "strays, a directory and an intermediate product", plant: { h, dir in
            try Data("junk".utf8).write(to: URL(fileURLWithPath: "\(dir)/junk.bin"))
            try FileManager.default.createDirectory(atPath: "\(dir)/nested/deeper", withIntermediateDirectories: true)
            try Data("x".utf8).write(to: URL(fileURLWithPath: "\(dir)/nested/deeper/file"))
            try Data("zip".utf8).write(to: URL(fileURLWithPath: "\(dir)/\(sha(h, "1.1.0")).zip"))
            try Data("bad".utf8).write(to: URL(fileURLWithPath: "\(dir)/unverified-nothex.part"))
        }, offer: { h in h.full("1.1.0") }, failDownload: true, result: .failed, remaining: { _ in [] }),
        Case(label: "a refused package", plant: { _, _ in }, offer: { h in
            var zip = ZipBuilder()
            zip.file("index.html", "<html></html>")
            zip.file("../escape.txt", "evil")
            let bytes = zip.build()
            h.origin.put("hostile.zip", bytes)
            let sha = PackageFixture.sha256(bytes)
            return h.full("1.1.0", ["url": "files/hostile.zip", "size": bytes.count, "sha256": sha, "packageSha256": sha])
        }, result: .failed),
        Case(label: "the installed version is offered again", plant: { h, dir in try plantPartial(h, dir, "1.0.0") },
             offer: { h in h.full("1.0.0") }, result: .upToDate),
        Case(label: "the partial of the offered file is kept", plant: { h, dir in
            try plantPartial(h, dir, "1.1.0")
            try Data("junk".utf8).write(to: URL(fileURLWithPath: "\(dir)/junk.bin"))
        }, offer: { h in h.full("1.1.0") }, failDownload: true, result: .failed,
             remaining: { h in ["\(sha(h, "1.1.0")).part", "\(sha(h, "1.1.0")).part.json"] }),
    ]

    @Test("downloads/ holds only what the current plan needs", arguments: cases)
    func collects(_ c: Case) async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        let dir = h.store.downloadsDirectory("mall")
        try c.plant(h, dir)
        let offer = try c.offer(h)
        if c.failDownload {
            let name = (offer["url"] as? String ?? "").replacingOccurrences(of: "files/", with: "")
            h.origin.override(name) { _, _ in .status(500) }
        }
        h.origin.setManifest(offer)
        let report = await h.sync()
        #expect(report.result == c.result, "\(report.error?.description ?? "")")
        if c.label == "a refused package" { #expect(report.error?.cause == .hostileArchive, "\(report.error?.description ?? "")") }
        let left = Set(try FileManager.default.contentsOfDirectory(atPath: dir))
        #expect(left == c.remaining(h))
        #expect(h.activeMatches("1.0.0"), "the installed version is untouched")
    }

    @Test("the kept partial of the offered file resumes with Range and installs byte for byte")
    func keptPartialResumes() async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        let dir = h.store.downloadsDirectory("mall")
        try Self.plantPartial(h, dir, "1.1.0")
        try Data("junk".utf8).write(to: URL(fileURLWithPath: "\(dir)/junk.bin"))
        h.origin.setManifest(h.full("1.1.0"))
        let report = await h.sync()
        #expect(report.result == .updated, "\(report.error?.description ?? "")")
        let bytes = h.fixture.bytes("1.1.0")
        #expect(report.bytesDownloaded == Int64(bytes.count - bytes.count / 2))
        #expect(h.origin.requests(for: "/files/1.1.0.zip").last?.header("Range") == "bytes=\(bytes.count / 2)-")
        #expect(h.activeMatches("1.1.0"))
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir).isEmpty)
    }

    @Test("status shows the bytes each app keeps, downloads included (library, --json, text)")
    func statusShowsBytes() async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        let dir = h.store.downloadsDirectory("mall")
        try Self.plantPartial(h, dir, "1.1.0")
        h.origin.override("1.1.0.zip") { _, _ in .status(500) }
        h.origin.setManifest(h.full("1.1.0"))
        #expect(await h.sync().result == .failed)

        let files = try FileManager.default.contentsOfDirectory(atPath: dir)
        let downloads = files.reduce(Int64(0)) { $0 + (FileSystem.fileSize("\(dir)/\($1)") ?? 0) }
        #expect(downloads >= Int64(h.fixture.bytes("1.1.0").count / 2))
        let version = h.store.versionDirectory("mall", Version("1.0.0")!)
        let extracted = tree(version).reduce(Int64(0)) { $0 + (FileSystem.fileSize("\(version)/\($1)") ?? 0) }
        let package = Int64(h.fixture.bytes("1.0.0").count)

        let status = try #require(try await h.agent().status(app: "mall").first)
        #expect(status.diskUsage.downloads == downloads)
        // A stored package is kept as its skeleton (its files' bytes are the version's objects).
        let kept = try #require(FileSystem.fileSize(h.store.skeletonPath("mall", Version("1.0.0")!)))
        #expect(kept < package)
        #expect(status.diskUsage.packages == kept)
        #expect(status.diskUsage.versions > extracted, "the version's files and its record")
        #expect(status.diskUsage.total >= status.diskUsage.versions + status.diskUsage.packages + downloads)

        let json = try await CLI.run(["status", "--root", h.root.path, "--app", "mall", "--json"])
        #expect(json.status == 0, "\(json.stderr)")
        let disk = try #require(CLI.json(json.stdout)?["diskBytes"] as? [String: Any])
        #expect((disk["downloads"] as? NSNumber)?.int64Value == downloads)
        #expect((disk["total"] as? NSNumber)?.int64Value == status.diskUsage.total)
        let text = try await CLI.run(["status", "--root", h.root.path])
        #expect(text.stdout.contains("disk: \(status.diskUsage.total) bytes"), "\(text.stdout)")
        #expect(text.stdout.contains("downloads \(downloads)"), "\(text.stdout)")
    }
}
