import Foundation
import Testing
@testable import OfflineAgent
import TestSupport

/// Hostile patched packages on the streamed path: bytes crafted so that what the
/// splitter, the project's central directory reader and libzip each see could differ.
/// The tree must only ever get an entry's own bytes, or the install is refused.
@Suite("Streamed patch hostile", .serialized)
struct StreamedPatchHostileTests {
    static func le16(_ v: Int) -> [UInt8] { [UInt8(v & 0xff), UInt8((v >> 8) & 0xff)] }
    static func le32(_ v: Int) -> [UInt8] { [UInt8(v & 0xff), UInt8((v >> 8) & 0xff), UInt8((v >> 16) & 0xff), UInt8((v >> 24) & 0xff)] }

    /// The central directory of a `ZipBuilder` zip (no comment): its bytes and offset.
    static func centralDirectory(_ zip: [UInt8]) -> (offset: Int, bytes: [UInt8], count: Int) {
        let end = zip.count - 22
        let count = Int(zip.le16(end + 10)), size = Int(zip.le32(end + 12)), offset = Int(zip.le32(end + 16))
        return (offset, Array(zip[offset..<(offset + size)]), count)
    }

    /// Each central entry's name and where its local header offset field is, in `cd`.
    static func centralEntries(_ cd: [UInt8]) -> [(name: String, offsetField: Int)] {
        var out: [(String, Int)] = []
        var cursor = 0
        while cursor + 46 <= cd.count {
            let n = Int(cd.le16(cursor + 28)), e = Int(cd.le16(cursor + 30)), c = Int(cd.le16(cursor + 32))
            out.append((String(decoding: cd[(cursor + 46)..<(cursor + 46 + n)], as: UTF8.self), cursor + 42))
            cursor += 46 + n + e + c
        }
        return out
    }

    /// `zip` with a second central directory and end record hidden in the first end
    /// record's comment: the same entries, `a`'s and `b`'s local header offsets swapped.
    /// libzip (ZIP_CHECKCONS) keeps the first (the second fails its header comparison);
    /// a reader that takes the last end record would take the second.
    static func twoEndRecords(_ zip: [UInt8], swapping a: String, _ b: String) -> [UInt8] {
        let (offset, cd, count) = centralDirectory(zip)
        var second = cd
        let entries = centralEntries(cd)
        let fa = entries.first { $0.name == a }!.offsetField, fb = entries.first { $0.name == b }!.offsetField
        let (oa, ob) = (Array(cd[fa..<(fa + 4)]), Array(cd[fb..<(fb + 4)]))
        second.replaceSubrange(fa..<(fa + 4), with: ob)
        second.replaceSubrange(fb..<(fb + 4), with: oa)
        let firstEnd = offset + cd.count
        let secondOffset = firstEnd + 22
        var tail = second
        tail += le32(0x0605_4b50) + le16(0) + le16(0) + le16(count) + le16(count) + le32(second.count) + le32(secondOffset) + le16(0)
        var out = Array(zip[0..<firstEnd])
        out += le32(0x0605_4b50) + le16(0) + le16(0) + le16(count) + le16(count) + le32(cd.count) + le32(offset) + le16(tail.count)
        out += tail
        return out
    }

    @Test("two end records: the tree links each entry's own bytes (libzip's central directory), or the install is refused")
    func twoEndRecordsStreamed() async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        let aBytes = [UInt8](repeating: 0x41, count: 300), bBytes = [UInt8](repeating: 0x42, count: 300)
        let zip = Self.twoEndRecords(StreamedPatchTests.zip("1.1.0", extra: [("a.txt", aBytes), ("b.txt", bBytes)]), swapping: "a.txt", "b.txt")
        h.origin.setManifest(try await StreamedPatchTests.patchTo(h, "twoends", zip))
        let report = await h.sync()
        let dir = h.store.versionDirectory("mall", Version("1.1.0")!)
        let a = FileManager.default.contents(atPath: "\(dir)/a.txt").map { [UInt8]($0) }
        #expect(a == nil || a == aBytes, "a.txt holds \(a.map { PackageFixture.sha256($0) } ?? "-"), not its own bytes")
        #expect(report.result == .failed && report.error?.cause == .hostileArchive, "\(report.error?.description ?? "installed")")
        #expect(h.activeMatches("1.0.0"))
        #expect(!FileSystem.exists(dir))
        StreamedPatchTests.noGarbage(h)
    }

    @Test("two end records: the central directory reader refuses them, so it never reads another directory than libzip")
    func twoEndRecordsReader() throws {
        let aBytes = [UInt8](repeating: 0x41, count: 30), bBytes = [UInt8](repeating: 0x42, count: 30)
        var builder = ZipBuilder()
        builder.file("a.txt", aBytes)
        builder.file("b.txt", bBytes)
        let temp = TemporaryDirectory("twoends")
        let path = temp.file("two.zip")
        try Data(Self.twoEndRecords(builder.build(), swapping: "a.txt", "b.txt")).write(to: URL(fileURLWithPath: path))
        #expect(throws: OfflineAgentError.self) { try ZipCentralDirectory.entries(of: path) }
        do { _ = try ZipCentralDirectory.entries(of: path) } catch let error as OfflineAgentError {
            #expect(error.cause == .hostileArchive)
        }
        // A plain zip still reads, and a comment holding no record changes nothing.
        let plain = temp.file("plain.zip")
        try Data(builder.build()).write(to: URL(fileURLWithPath: plain))
        #expect(try ZipCentralDirectory.entries(of: plain).count == 2)
    }

    /// Every file of a tree, by relative path: its bytes and whether it is executable.
    static func files(_ dir: String) -> [String: [UInt8]] {
        var out: [String: [UInt8]] = [:]
        for name in tree(dir) where !FileSystem.isDirectory("\(dir)/\(name)") {
            var st = stat()
            let executable = stat("\(dir)/\(name)", &st) == 0 && st.st_mode & 0o111 != 0
            out[name] = [UInt8](FileManager.default.contents(atPath: "\(dir)/\(name)") ?? Data()) + (executable ? [0xEE] : [])
        }
        return out
    }

    /// Installs `bytes` as a streamed patch update of 1.0.0 and checks it against libzip's
    /// own extraction of the same bytes (the file path): installed, the tree is exactly
    /// what libzip extracts; refused, 1.0.0 stays whole and no object is left behind.
    static func endToEnd(_ bytes: [UInt8], label: String, sourceLocation: SourceLocation = #_sourceLocation) async throws -> SyncReport {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        h.origin.setManifest(try await StreamedPatchTests.patchTo(h, "e2e", bytes))
        let report = await h.sync()
        let reference = TemporaryDirectory("libzip-reference")
        let archive = reference.file("package.zip")
        try Data(bytes).write(to: URL(fileURLWithPath: archive))
        let extracted = (try? ZipExtractor.extract(archive: URL(fileURLWithPath: archive), to: URL(fileURLWithPath: reference.file("tree")), durable: false)) != nil
        if report.result == .updated {
            #expect(extracted, "\(label): installed (\(report.via.map { "\($0)" } ?? "?")) what libzip refuses", sourceLocation: sourceLocation)
            let installed = Self.files(h.store.versionDirectory("mall", Version("1.1.0")!))
            let expected = Self.files(reference.file("tree"))
            #expect(installed.keys.sorted() == expected.keys.sorted(), "\(label): names differ", sourceLocation: sourceLocation)
            for (name, content) in expected where installed[name] != content {
                Issue.record("\(label): \(name) differs from libzip's extraction", sourceLocation: sourceLocation)
            }
        } else {
            #expect(h.activeMatches("1.0.0"), "\(label): 1.0.0 not intact after \(report.error?.description ?? "")", sourceLocation: sourceLocation)
            #expect(!FileSystem.exists(h.store.versionDirectory("mall", Version("1.1.0")!)), sourceLocation: sourceLocation)
        }
        let garbage = StreamedPatchTests.objects(h).filter { $0.hasPrefix(".") || (ObjectStoreTests.inode("\(h.store.objectsDirectory)/\($0)")?.links ?? 0) < 2 }
        #expect(garbage.isEmpty, "\(label): \(report.result) via \(report.via.map { "\($0)" } ?? "-") \(report.error?.description ?? ""): \(garbage.count) objects left behind", sourceLocation: sourceLocation)
        StreamedPatchTests.noGarbage(h, sourceLocation: sourceLocation)
        return report
    }

    /// The fixture's 1.1.0 entries, then `extra`, as hand-built entries.
    static func baseEntries() -> [SplitterPropertyTests.Entry] {
        let source = "\(Repo.fixtures)/sample-app/1.1.0"
        return tree(source).filter { !FileSystem.isDirectory("\(source)/\($0)") }.map {
            SplitterPropertyTests.stored(Array($0.utf8), [UInt8](FileManager.default.contents(atPath: "\(source)/\($0)")!))
        }
    }

    @Test("crafted central directories (offsets into another entry, shared local headers, headers that disagree, lying sizes): libzip's bytes or a refusal")
    func craftedDirectories() async throws {
        typealias P = SplitterPropertyTests
        let base = Self.baseEntries()
        // A local header hidden inside an entry's data, named by the central directory.
        let hidden = P.stored(Array("hidden.txt".utf8), Array("HIDDEN".utf8))
        var carrier = P.stored(Array("carrier.bin".utf8), [])
        let hiddenHeader = P.build([hidden])
        let hiddenLocal = Array(hiddenHeader[0..<(30 + hidden.name.count + hidden.payload.count)])
        carrier = P.stored(carrier.name, Array("xx".utf8) + hiddenLocal + Array("yy".utf8))
        var intoData = P.build(base + [carrier])
        do {
            // Point carrier's central entry at the hidden header (2 bytes into its data) and rename it.
            let cd = Self.centralDirectory(intoData)
            let entries = Self.centralEntries(cd.bytes)
            let field = cd.offset + entries.last!.offsetField
            let carrierOffset = Int(intoData.le32(field))
            let newOffset = carrierOffset + 30 + carrier.name.count + 2
            intoData.replaceSubrange(field..<(field + 4), with: P.le32(UInt32(newOffset)))
        }
        // Two central entries sharing one local header.
        var shared = P.build(base)
        do {
            let cd = Self.centralDirectory(shared)
            let entries = Self.centralEntries(cd.bytes)
            let first = cd.offset + entries[0].offsetField, second = cd.offset + entries[1].offsetField
            shared.replaceSubrange(second..<(second + 4), with: Array(shared[first..<(first + 4)]))
        }
        var disagree = base
        disagree[0].localName = Array("other.html".utf8)
        var shorter = base
        shorter[0].compressed -= 2; shorter[0].uncompressed -= 2
        var longer = base
        longer[0].compressed += 2; longer[0].uncompressed += 2
        var withExtras = base
        withExtras[0].localExtra = P.le16(0xCAFE) + P.le16(4) + [1, 2, 3, 4]
        withExtras[1].centralExtra = P.le16(0x5455) + P.le16(5) + [1, 2, 3, 4, 5]
        var executable = base
        executable[0].mode = 0o100755
        var junk = base
        junk[0].junkAfter = Array("JUNKJUNK".utf8)
        var zip64Extra = base
        zip64Extra[0].localExtra = P.le16(0x0001) + P.le16(16) + [UInt8](repeating: 0, count: 16)
        var empty = base
        empty.append(P.stored(Array("empty.txt".utf8), []))
        let cases: [(String, [UInt8], Bool)] = [
            ("offset into another entry's data", intoData, false),
            ("two central entries, one local header", shared, false),
            ("local name disagrees", P.build(disagree), false),
            ("local sizes shorter", P.build(shorter), false),
            ("local sizes longer", P.build(longer), false),
            ("extra fields", P.build(withExtras), true),
            ("executable entry", P.build(executable), true),
            ("junk between entries", P.build(junk), true),
            ("zip64 extra in a plain local header", P.build(zip64Extra), true),
            ("an empty file and a comment", P.build(empty, comment: Array("a comment".utf8)), true),
        ]
        for (label, bytes, installs) in cases {
            let report = try await Self.endToEnd(bytes, label: label)
            if installs { #expect(report.result == .updated, "\(label): \(report.error?.description ?? "")") }
        }
    }

    @Test("seeded hostile and valid packages end to end through sync: libzip's bytes or a refusal, 1.0.0 intact, no garbage")
    func seededEndToEnd() async throws {
        typealias P = SplitterPropertyTests
        var updated = 0
        for seed in UInt64(1000)..<1040 {
            var rng = P.Rng(state: seed)
            // A quarter valid shapes (they must install), the rest hostile, half of those mutated.
            var bytes = P.shape(&rng, big: false, hostile: seed % 4 != 1)
            if seed % 2 == 0 { bytes = P.mutate(bytes, &rng) }
            let report = try await Self.endToEnd(bytes, label: "seed \(seed)")
            if report.result == .updated { updated += 1 }
            if seed % 4 == 1 { #expect(report.result == .updated && report.via == .patch, "seed \(seed): \(report.error?.description ?? "")") }
        }
        #expect(updated >= 10, "updated \(updated)")
    }

    @Test("a real ENOSPC in the middle of a large entry (no reserve to warn): the stream stops with a failure, no descriptor or temporary file left")
    func enospcMidStream() throws {
        guard let disk = CrashSafetyTests.SmallDisk(megabytes: 1) else {
            Issue.record("cannot mount a tmpfs here (needs root/CAP_SYS_ADMIN)")
            return
        }
        let objects = try ObjectStore(root: disk.path)
        var rng = SplitterPropertyTests.Rng(state: 3)
        // Larger than the in-memory bound: streamed to a temporary object as it arrives.
        let input = SplitterPropertyTests.build([SplitterPropertyTests.stored(Array("big.bin".utf8), rng.bytes(ObjectWriter.wholeCapacity + 4096))])
        let before = SplitterPropertyTests.descriptors(into: objects.directory)
        do {
            let splitter = PatchedPackageSplitter(objects: objects, reserve: nil)
            var offset = 0
            input.withUnsafeBytes { all in
                while offset < all.count {
                    let length = min(all.count - offset, 128 << 10)
                    guard splitter.feed(UnsafeRawBufferPointer(rebasing: all[offset..<(offset + length)])) else { break }
                    offset += length
                }
            }
            guard case .failure(let failure)? = splitter.stop else {
                Issue.record("expected a failure, got \(String(describing: splitter.stop))")
                return
            }
            #expect((failure as? POSIXFailure)?.errno == ENOSPC, "\(failure)")
            #expect(offset < input.count, "stopped early")
        }
        #expect(SplitterPropertyTests.descriptors(into: objects.directory) == before)
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: objects.directory)) ?? []).isEmpty, "the temporary object is removed")
    }

    @Test("two syncs at once on one root during a streamed update: one installs, the other waits or finds it done; the tree is whole, no garbage")
    func concurrentSyncs() async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        h.origin.setManifest(try h.patch(from: "1.0.0", to: "1.1.0"))
        async let first = h.sync()
        async let second = h.sync()
        let reports = await [first, second]
        #expect(reports.filter { $0.result == .updated }.count == 1, "\(reports.map { "\($0.result) \($0.error?.description ?? "")" })")
        #expect(reports.allSatisfy { $0.result == .updated || $0.result == .upToDate || $0.error?.cause == .busy },
                "\(reports.map { "\($0.result) \($0.error?.description ?? "")" })")
        #expect(h.activeMatches("1.1.0"))
        #expect(CrashSafetyTests.tree(of: h.store.versionDirectory("mall", Version("1.0.0")!), equals: "\(Repo.fixtures)/sample-app/1.0.0"))
        StreamedPatchTests.noGarbage(h)
    }

    @Test("serving the old version while a streamed update builds the new tree: every read is 1.0.0's or 1.1.0's bytes")
    func serveDuringUpdate() async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        h.origin.setManifest(try h.patch(from: "1.0.0", to: "1.1.0"))
        let name = "index.html"
        let (old, new) = (h.expected("1.0.0", name), h.expected("1.1.0", name))
        let update = Task { await h.sync() }
        var reads = 0
        while reads < 200 {
            if let bytes = try await h.served(name) { #expect(bytes == old || bytes == new, "a torn or foreign read") }
            reads += 1
        }
        let report = await update.value
        #expect(report.result == .updated, "\(report.error?.description ?? "")")
        #expect(try await h.served(name) == new)
    }

    @Test("the tree builder links an object only to the entry whose CRC-32 and size libzip gives for it: swapped objects are refused")
    func swappedObjectsRefused() throws {
        typealias P = SplitterPropertyTests
        let temp = TemporaryDirectory("swap")
        let objects = try ObjectStore(root: temp.path)
        let input = P.build([P.stored(Array("a.txt".utf8), Array(repeating: 0x41, count: 50)), P.stored(Array("b.txt".utf8), Array(repeating: 0x42, count: 50))])
        let splitter = PatchedPackageSplitter(objects: objects, reserve: nil)
        #expect(input.withUnsafeBytes { splitter.feed($0) })
        #expect(splitter.endedCleanly)
        splitter.finish()
        let skeleton = temp.file("new.skel")
        try PackageSkeleton.write(size: splitter.size, segments: splitter.segments.map { ($0.start, $0.length, $0.object?.name) },
                                  skeletonBytes: splitter.skeletonBytes, to: skeleton)
        let view = try #require(PackageView(skeletonPath: skeleton, objectsDirectory: objects.directory))
        var swapped = splitter.objectsByOffset
        let offsets = swapped.keys.sorted()
        #expect(offsets.count == 2)
        (swapped[offsets[0]], swapped[offsets[1]]) = (swapped[offsets[1]], swapped[offsets[0]])
        #expect(throws: OfflineAgentError.self) {
            try ZipExtractor.makeTree(view: view, objectsByOffset: swapped, path: "swapped", to: temp.file("tree-swapped"),
                                      limits: ExtractionLimits(), objects: objects)
        }
        #expect(!FileSystem.exists(temp.file("tree-swapped")))
        // The splitter's own map builds the tree, each file its own bytes.
        _ = try ZipExtractor.makeTree(view: view, objectsByOffset: splitter.objectsByOffset, path: "plain", to: temp.file("tree"),
                                      limits: ExtractionLimits(), objects: objects)
        #expect(FileManager.default.contents(atPath: temp.file("tree/a.txt")) == Data(repeating: 0x41, count: 50))
        #expect(FileManager.default.contents(atPath: temp.file("tree/b.txt")) == Data(repeating: 0x42, count: 50))
    }

    @Test("a patch whose output claims a 4 GB stored entry on a small disk: the patch is unusable (the full package installs), not a disk-full failure")
    func hugeClaimFallsBack() async throws {
        guard let disk = CrashSafetyTests.SmallDisk(megabytes: 16) else {
            Issue.record("cannot mount a tmpfs here (needs root/CAP_SYS_ADMIN)")
            return
        }
        let h = try SyncHarness()
        let root = "\(disk.path)/root"
        let agent = { Agent(root: URL(fileURLWithPath: root), configuration: h.configuration) }
        let sync = { await agent().sync(app: "mall", manifest: h.origin.manifestURL, options: SyncOptions(force: true)) }
        typealias P = SplitterPropertyTests
        let v1 = P.build([P.stored(Array("index.html".utf8), Array("one".utf8))])
        let v2 = P.build([P.stored(Array("index.html".utf8), Array("two".utf8))])
        // What the hostile patch makes: a header claiming 0xFFFFFFF0 stored bytes, then little.
        var lying = P.stored(Array("index.html".utf8), Array("two".utf8))
        lying.compressed = 0xFFFF_FFF0; lying.uncompressed = 0xFFFF_FFF0
        let hostile = P.build([lying])
        func manifest(_ version: String, _ bytes: [UInt8], patch: [UInt8]?) {
            let sha = PackageFixture.sha256(bytes)
            h.origin.put("\(version).zip", bytes)
            var object: [String: Any] = [
                "app": "mall", "version": version, "miniVersion": "1.0.0", "isPatch": false, "url": "files/\(version).zip",
                "size": bytes.count, "sha256": sha, "packageSha256": sha, "whitelist": [SyncHarness.whitelist], "rollout": 100,
            ]
            if let patch {
                h.origin.put("\(version).bsdiff", patch)
                object.merge(["isPatch": true, "baseVersion": "1.0.0", "url": "files/\(version).bsdiff", "size": patch.count,
                              "sha256": PackageFixture.sha256(patch), "fullUrl": "files/\(version).zip", "fullSize": bytes.count,
                              "fullSha256": sha]) { $1 }
            }
            h.origin.setManifest(object)
        }
        manifest("1.0.0", v1, patch: nil)
        #expect(await sync().result == .updated)
        let dir = h.fixture.directory
        try Data(v1).write(to: URL(fileURLWithPath: dir.file("v1.zip")))
        try Data(hostile).write(to: URL(fileURLWithPath: dir.file("hostile.zip")))
        #expect(try await run("bsdiff", [dir.file("v1.zip"), dir.file("hostile.zip"), dir.file("h.bsdiff")]).status == 0)
        // The manifest's compression is none and its size is v2's: a header size mismatch would stop
        // this patch early; gzip drops that bound, so the splitter alone meets the lie.
        manifest("2.0.0", v2, patch: [UInt8](FileManager.default.contents(atPath: dir.file("h.bsdiff"))!))
        let report = await sync()
        #expect(report.result == .updated && report.via == .full, "\(report.result): \(report.error.map { "\($0.cause.rawValue) \($0)" } ?? "")")
        #expect(report.patchFallbackReason != nil)
    }

    @Test("an unverified stream of more tiny entries than a package may have stops at the limit: no more objects than maxEntries")
    func entryLimitBoundsObjects() throws {
        typealias P = SplitterPropertyTests
        let temp = TemporaryDirectory("many")
        let objects = try ObjectStore(root: temp.path)
        let input = P.build((0..<300).map { P.stored(Array("f\($0)".utf8), Array("distinct \($0)".utf8)) })
        let splitter = PatchedPackageSplitter(objects: objects, reserve: nil, maxEntries: 100)
        #expect(!input.withUnsafeBytes { splitter.feed($0) })
        guard case .notPlain? = splitter.stop else {
            Issue.record("expected a stop, got \(String(describing: splitter.stop))")
            return
        }
        #expect(splitter.objectsWritten <= 100)
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: objects.directory)) ?? []).count <= 100)
        // At the limit, the package streams as before.
        let fits = PatchedPackageSplitter(objects: objects, reserve: nil, maxEntries: 300)
        #expect(input.withUnsafeBytes { fits.feed($0) } && fits.endedCleanly)
    }

    @Test("a zip64 end record read whenever its locator is there (as libzip does): consistent, it reads; contradicting the end record, hostile")
    func zip64Locator() async throws {
        let temp = TemporaryDirectory("zip64")
        try Data("hi\n".utf8).write(to: URL(fileURLWithPath: temp.file("a.txt")))
        // Info-ZIP's forced zip64: the end record's offset saturated, the rest plain.
        let made = try await run("zip", ["-q", "-fz", "-0", temp.file("z.zip"), "a.txt"], cwd: temp.path)
        #expect(made.status == 0, "\(made.stderr)")
        let bytes = [UInt8](FileManager.default.contents(atPath: temp.file("z.zip")) ?? Data())
        #expect(try ZipCentralDirectory.entries(of: temp.file("z.zip")).count == 1)
        // The end record now names another central directory offset than its zip64 record.
        var contradicting = bytes
        let end = contradicting.count - 22
        contradicting.replaceSubrange((end + 16)..<(end + 20), with: [0, 0, 0, 0])
        try Data(contradicting).write(to: URL(fileURLWithPath: temp.file("c.zip")))
        do {
            _ = try ZipCentralDirectory.entries(of: temp.file("c.zip"))
            Issue.record("a contradicted zip64 end record was read")
        } catch let error as OfflineAgentError {
            #expect(error.cause == .hostileArchive, "\(error)")
        }
    }

    @Test("end to end: a new file with an installed file's name, size and CRC-32 but other bytes gets its own bytes; the old version keeps its own")
    func forgedNamesakeEndToEnd() async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        let old = ObjectStoreTests.files("1.0.0")
        let name = try #require(old.keys.sorted().first { (old[$0]?.count ?? 0) >= 16 })
        let original = [UInt8](old[name]!)
        var forged = original
        forged[0] ^= 0x20
        let size = forged.count
        forged.replaceSubrange((size - 4)..<size, with: SplitterPropertyTests.forge(
            prefix: ZipBuilder.crc32(Array(forged[0..<(size - 4)])), target: ZipBuilder.crc32(original)))
        #expect(ZipBuilder.crc32(forged) == ZipBuilder.crc32(original) && forged != original)
        let source = "\(Repo.fixtures)/sample-app/1.1.0"
        var entries = tree(source).filter { !FileSystem.isDirectory("\(source)/\($0)") && $0 != name }.map {
            SplitterPropertyTests.stored(Array($0.utf8), [UInt8](FileManager.default.contents(atPath: "\(source)/\($0)")!))
        }
        entries.append(SplitterPropertyTests.stored(Array(name.utf8), forged))
        h.origin.setManifest(try await StreamedPatchTests.patchTo(h, "forged", SplitterPropertyTests.build(entries)))
        let report = await h.sync()
        #expect(report.result == .updated && report.via == .patch, "\(report.error?.description ?? "")")
        let newDir = h.store.versionDirectory("mall", Version("1.1.0")!), oldDir = h.store.versionDirectory("mall", Version("1.0.0")!)
        #expect(FileManager.default.contents(atPath: "\(newDir)/\(name)").map { [UInt8]($0) } == forged, "the new file has its own bytes")
        #expect(FileManager.default.contents(atPath: "\(oldDir)/\(name)").map { [UInt8]($0) } == original, "the old file keeps its bytes")
        #expect(ObjectStoreTests.inode("\(newDir)/\(name)")?.ino != ObjectStoreTests.inode("\(oldDir)/\(name)")?.ino)
        StreamedPatchTests.noGarbage(h)
    }
}
