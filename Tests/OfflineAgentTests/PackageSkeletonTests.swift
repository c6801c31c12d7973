import Foundation
import Testing
@testable import OfflineAgent
import TestSupport

/// The installed package kept as its skeleton over the objects (no second copy of the
/// files), read back byte for byte as the old input of real bsdiff patches through
/// cbspatch's read callback; damage to it or to an object falls back to the full package.
@Suite("Package skeleton", .serialized)
struct PackageSkeletonTests {
    @Test("a stored package is kept as a skeleton that reads back as the exact zip")
    func skeletonReadsBack() async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        let version = Version("1.0.0")!
        #expect(!FileSystem.exists(h.store.packagePath("mall", version)), "no second copy of the package")
        let skeleton = h.store.skeletonPath("mall", version)
        let size = try #require(FileSystem.fileSize(skeleton))
        let zipSize = Int64(h.fixture.bytes("1.0.0").count)
        #expect(size < zipSize / 2, "skeleton \(size) bytes for a \(zipSize)-byte package")
        let view = try #require(PackageView(skeletonPath: skeleton, objectsDirectory: h.store.objectsDirectory))
        #expect(view.size == zipSize)
        var bytes = [UInt8](repeating: 0, count: Int(zipSize) + 10)
        // Odd offsets and lengths that straddle segments.
        var offset = 0
        var step = 1
        while offset < Int(zipSize) {
            let n = bytes.withUnsafeMutableBytes { view.read(into: $0.baseAddress! + offset, count: step, at: Int64(offset)) }
            #expect(n == min(step, Int(zipSize) - offset))
            guard n > 0 else { break }
            offset += n
            step = step * 3 % 7919 + 1
        }
        #expect(Array(bytes[0..<Int(zipSize)]) == h.fixture.bytes("1.0.0"))
        #expect(try view.sha256() == PackageFixture.sha256(h.fixture.bytes("1.0.0")))
        #expect(h.store.diskUsage("mall").packageZips == 0)
    }

    @Test("patch updates apply through the skeleton view, release after release")
    func patchesThroughView() async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        for (base, next) in [("1.0.0", "1.1.0"), ("1.1.0", "1.2.0"), ("1.2.0", "1.3.0")] {
            h.origin.setManifest(try h.patch(from: base, to: next))
            let report = await h.sync()
            #expect(report.result == .updated, "\(report.error?.description ?? "")")
            #expect(report.via == .patch, "\(report.patchFallbackReason ?? "")")
            #expect(report.patchFallbackReason == nil)
            #expect(h.activeMatches(next))
            #expect(FileSystem.exists(h.store.skeletonPath("mall", Version(next)!)))
            #expect(!FileSystem.exists(h.store.packagePath("mall", Version(next)!)))
        }
        // Only the kept versions' skeletons remain.
        let packages = try FileManager.default.contentsOfDirectory(atPath: "\(h.store.appDirectory("mall"))/packages").sorted()
        #expect(packages == ["1.2.0.skel", "1.3.0.skel"])
    }

    @Test("a truncated object under the skeleton: the patch fails, the full package is installed")
    func damagedObjectFallsBack() async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        let view = try #require(PackageView(skeletonPath: h.store.skeletonPath("mall", Version("1.0.0")!), objectsDirectory: h.store.objectsDirectory))
        guard case .object(let name) = try #require(view.skeleton.segments.first { if case .object = $0.source { true } else { false } }).source else {
            Issue.record("no object segment")
            return
        }
        #expect(truncate("\(h.store.objectsDirectory)/\(name)", 1) == 0)
        // The callback's short read is cbspatch's I/O error, and nothing is left behind.
        let patch = h.fixture.directory.file("direct.bsdiff")
        try Data(try h.fixture.patch(from: "1.0.0", to: "1.1.0")).write(to: URL(fileURLWithPath: patch))
        let out = h.fixture.directory.file("direct-out.zip")
        #expect(throws: OfflineAgentError.self) { try Patcher.apply(view: view, patch: URL(fileURLWithPath: patch), to: URL(fileURLWithPath: out)) }
        #expect(!FileSystem.exists(out))

        h.origin.setManifest(try h.patch(from: "1.0.0", to: "1.1.0"))
        let report = await h.sync()
        #expect(report.result == .updated)
        #expect(report.via == .full)
        // No pre-hash: the patch is tried, its read of the short object fails, the full package follows.
        #expect(report.patchFallbackReason != nil)
        #expect(h.activeMatches("1.1.0"))
    }

    @Test("a package with deflated entries keeps its zip, and status says so")
    func deflatedKeepsZip() async throws {
        let h = try SyncHarness()
        var zip = ZipBuilder()
        zip.file("index.html", "<p>deflated</p>", deflate: true)
        let bytes = zip.build()
        h.origin.put("deflated.zip", bytes)
        h.origin.setManifest(h.full("1.0.0", ["url": "files/deflated.zip", "size": bytes.count,
                                               "sha256": PackageFixture.sha256(bytes), "packageSha256": PackageFixture.sha256(bytes)]))
        #expect(await h.sync().result == .updated)
        #expect(FileSystem.exists(h.store.packagePath("mall", Version("1.0.0")!)))
        #expect(!FileSystem.exists(h.store.skeletonPath("mall", Version("1.0.0")!)))
        #expect(h.store.diskUsage("mall").packageZips == 1)
        let status = try await CLI.run(["status", "--root", h.root.path])
        #expect(status.stdout.contains("kept as whole zips"), "\(status.stdout)")
    }

    @Test("hostile skeletons are refused: bad magic, overlong tables, names outside objects/, sizes that disagree")
    func hostileSkeletons() throws {
        let scratch = TemporaryDirectory("skel")
        func view(_ bytes: [UInt8]) -> PackageView? {
            let path = scratch.file("s-\(UInt32.random(in: 0...UInt32.max)).skel")
            guard FileManager.default.createFile(atPath: path, contents: Data(bytes)) else { return nil }
            return PackageView(skeletonPath: path, objectsDirectory: scratch.path)
        }
        func header(size: UInt64, count: UInt64) -> [UInt8] {
            var out = PackageSkeleton.magic
            out.appendLittleEndian(size)
            out.appendLittleEndian(count)
            return out
        }
        var good = header(size: 3, count: 1)
        good.append(0)
        good.appendLittleEndian(3)
        good += [1, 2, 3]
        #expect(view(good) != nil)
        #expect(view(Array("NOTASKEL".utf8) + good.dropFirst(8)) == nil)
        #expect(view(header(size: 3, count: UInt64.max)) == nil)
        var escape = header(size: 3, count: 1)
        escape.append(1)
        escape.appendLittleEndian(3)
        escape.append(UInt8("../../etc/passwd".utf8.count))
        escape += Array("../../etc/passwd".utf8)
        #expect(view(escape) == nil)
        var long = header(size: 3, count: 1)
        long.append(0)
        long.appendLittleEndian(UInt64.max)
        #expect(view(long + [1, 2, 3]) == nil)
        #expect(view(good.dropLast()) == nil, "skeleton bytes shorter than the table says")
        #expect(view(good + [9]) == nil, "trailing bytes")
    }
}
