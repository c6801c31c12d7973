import Foundation
import Testing
@testable import OfflineAgent
import TestSupport

/// The content-addressed store: versions made of hard links to shared objects, only
/// missing objects written, damaged objects never linked, unused objects collected,
/// and kill -9 at each of its steps survived. Real fixture packages, real processes.
@Suite("Object store", .serialized)
struct ObjectStoreTests {
    /// The regular files of a fixture version: relative path → bytes.
    static func files(_ version: String) -> [String: Data] {
        let source = "\(Repo.fixtures)/sample-app/\(version)"
        var files: [String: Data] = [:]
        for name in tree(source) where !FileSystem.isDirectory("\(source)/\(name)") {
            files[name] = FileManager.default.contents(atPath: "\(source)/\(name)")
        }
        return files
    }

    static func inode(_ path: String) -> (ino: UInt64, links: Int)? {
        var st = stat()
        guard lstat(path, &st) == 0 else { return nil }
        return (UInt64(st.st_ino), Int(st.st_nlink))
    }

    static func mode(_ path: String) -> mode_t {
        var st = stat()
        lstat(path, &st)
        return st.st_mode & 0o7777
    }

    static func extract(_ zip: String, to destination: String, objects: ObjectStore) throws -> ExtractionSummary {
        try ZipExtractor.extract(
            archive: URL(fileURLWithPath: zip), to: URL(fileURLWithPath: destination),
            limits: ExtractionLimits(), durable: false, objects: objects)
    }

    @Test("two versions share the inode of every unchanged file; changed files get their own; all read-only")
    func sharedInodes() async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        h.origin.setManifest(try h.patch(from: "1.0.0", to: "1.1.0"))
        #expect(await h.sync().result == .updated)
        let old = h.store.versionDirectory("mall", Version("1.0.0")!)
        let new = h.store.versionDirectory("mall", Version("1.1.0")!)
        let (before, after) = (Self.files("1.0.0"), Self.files("1.1.0"))
        var unchanged = 0, changed = 0
        for (name, bytes) in after {
            let shared = Self.inode("\(new)/\(name)")?.ino == Self.inode("\(old)/\(name)")?.ino
            if before[name] == bytes {
                unchanged += 1
                #expect(shared, "\(name) is unchanged: one inode for both versions")
                #expect(Self.inode("\(new)/\(name)")!.links >= 3, "two versions and the object")
            } else {
                changed += 1
                #expect(!shared, "\(name) changed")
            }
            #expect(Self.mode("\(new)/\(name)") == 0o444 || Self.mode("\(new)/\(name)") == 0o555, "\(name) is read-only")
        }
        #expect(unchanged > 0 && changed > 0, "the fixture update changes some files and keeps others")
        for name in tree(new) where FileSystem.isDirectory("\(new)/\(name)") {
            #expect(Self.mode("\(new)/\(name)") == 0o555, "directory \(name) is read-only")
        }
        #expect(Self.mode(new) == 0o555)
        #expect(h.activeMatches("1.1.0"))
    }

    @Test("nothing is written for unchanged entries; the same package again writes nothing")
    func writesOnlyNewObjects() throws {
        let fixture = try PackageFixture()
        let scratch = TemporaryDirectory("objects")
        let objects = try ObjectStore(root: scratch.path)
        let first = try Self.extract(fixture.package("1.0.0"), to: scratch.file("a"), objects: objects)
        let distinct = Set(Self.files("1.0.0").values)
        #expect(first.written == distinct.reduce(0) { $0 + Int64($1.count) }, "each distinct content once")
        let again = try Self.extract(fixture.package("1.0.0"), to: scratch.file("b"), objects: objects)
        #expect(again.written == 0)
        #expect(again.linked == again.files)
        let next = try Self.extract(fixture.package("1.1.0"), to: scratch.file("c"), objects: objects)
        let newContent = Set(Self.files("1.1.0").values).subtracting(distinct)
        #expect(next.written == newContent.reduce(0) { $0 + Int64($1.count) }, "only the new contents")
        #expect(next.written < next.bytes)
        #expect(CrashSafetyTests.tree(of: scratch.file("c"), equals: "\(Repo.fixtures)/sample-app/1.1.0"))
    }

    @Test("an object is freed when the last version that links it goes")
    func freedWithLastVersion() async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        let objects = h.store.objectsDirectory
        let onlyInFirst = Set(Self.files("1.0.0").values)
            .subtracting(Self.files("1.1.0").values).subtracting(Self.files("1.2.0").values)
        #expect(!onlyInFirst.isEmpty)
        let stored = { Set(((try? FileManager.default.contentsOfDirectory(atPath: objects)) ?? []).compactMap { FileManager.default.contents(atPath: "\(objects)/\($0)") }) }
        #expect(onlyInFirst.isSubset(of: stored()))
        try await h.install("1.1.0")
        #expect(onlyInFirst.isSubset(of: stored()), "1.0.0 is kept as the previous version")
        try await h.install("1.2.0")
        #expect(stored().isDisjoint(with: onlyInFirst), "1.0.0 is gone, and its own objects with it")
        // Everything left is linked by a kept version.
        for name in try FileManager.default.contentsOfDirectory(atPath: objects) {
            #expect((Self.inode("\(objects)/\(name)")?.links ?? 0) >= 2, "\(name) is linked")
        }
        #expect(h.activeMatches("1.2.0"))
    }

    @Test("a tampered or truncated object is never linked: it is written afresh", arguments: [false, true])
    func tamperedObject(large: Bool) throws {
        let scratch = TemporaryDirectory("objects")
        var zip = ZipBuilder()
        // Past the in-memory limit, the large case takes the hash-then-write path.
        let big = (0..<(large ? ObjectWriter.wholeCapacity + 4096 : 3000)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        zip.file("a/big.bin", big)
        zip.file("short.txt", Array("short and sweet".utf8))
        try zip.write(to: scratch.file("p.zip"))
        let objects = try ObjectStore(root: scratch.path)
        _ = try Self.extract(scratch.file("p.zip"), to: scratch.file("v1"), objects: objects)
        let bigObject = "\(objects.directory)/\(PackageFixture.sha256(big))"
        let shortObject = "\(objects.directory)/\(PackageFixture.sha256(Array("short and sweet".utf8)))"
        #expect(FileSystem.exists(bigObject) && FileSystem.exists(shortObject))
        // Same size, one byte changed; and a truncated one (what a power cut can leave).
        let handle = try #require(FileHandle(forUpdatingAtPath: bigObject))
        try handle.seek(toOffset: 100)
        try handle.write(contentsOf: Data([big[100] ^ 0xFF]))
        try handle.close()
        #expect(truncate(shortObject, 5) == 0)
        let tamperedInode = Self.inode(bigObject)!.ino

        let again = try Self.extract(scratch.file("p.zip"), to: scratch.file("v2"), objects: objects)
        #expect(again.linked == 0, "no damaged object is linked")
        #expect(FileManager.default.contents(atPath: scratch.file("v2/a/big.bin")) == Data(big))
        #expect(FileManager.default.contents(atPath: scratch.file("v2/short.txt")) == Data("short and sweet".utf8))
        #expect(Self.inode(scratch.file("v2/a/big.bin"))!.ino != tamperedInode)
        // The store holds good bytes again, under the same name, for the next version.
        #expect(FileManager.default.contents(atPath: bigObject) == Data(big))
        #expect(Self.inode(bigObject)!.ino == Self.inode(scratch.file("v2/a/big.bin"))!.ino)
        let third = try Self.extract(scratch.file("p.zip"), to: scratch.file("v3"), objects: objects)
        #expect(third.linked == 2 && third.written == 0)
    }

    @Test("an object made writable is not linked: the new version's file stays read-only")
    func writableObject() throws {
        let scratch = TemporaryDirectory("objects")
        var zip = ZipBuilder()
        zip.file("app.js", Array("console.log(1)".utf8))
        try zip.write(to: scratch.file("p.zip"))
        let objects = try ObjectStore(root: scratch.path)
        _ = try Self.extract(scratch.file("p.zip"), to: scratch.file("v1"), objects: objects)
        let object = "\(objects.directory)/\(PackageFixture.sha256(Array("console.log(1)".utf8)))"
        #expect(chmod(object, 0o644) == 0)
        let again = try Self.extract(scratch.file("p.zip"), to: scratch.file("v2"), objects: objects)
        #expect(again.linked == 0)
        #expect(Self.mode(scratch.file("v2/app.js")) == 0o444)
        #expect(Self.mode(object) == 0o444, "the store's name holds a read-only inode again")
    }

    @Test("executable and plain files with the same bytes are different objects")
    func modesKeptApart() throws {
        let scratch = TemporaryDirectory("objects")
        var zip = ZipBuilder()
        zip.file("run.sh", Array("#!/bin/sh\necho hi\n".utf8), mode: 0o100755)
        zip.file("copy.txt", Array("#!/bin/sh\necho hi\n".utf8), mode: 0o100644)
        try zip.write(to: scratch.file("p.zip"))
        let objects = try ObjectStore(root: scratch.path)
        _ = try Self.extract(scratch.file("p.zip"), to: scratch.file("v"), objects: objects)
        #expect(Self.mode(scratch.file("v/run.sh")) == 0o555)
        #expect(Self.mode(scratch.file("v/copy.txt")) == 0o444)
        #expect(Self.inode(scratch.file("v/run.sh"))!.ino != Self.inode(scratch.file("v/copy.txt"))!.ino)
    }

    @Test("two apps that ship the same file store it once; status accounts alone, shared and store bytes")
    func acrossApps() throws {
        let scratch = TemporaryDirectory("root")
        let store = Store(root: scratch.path)
        let vendor = [UInt8](repeating: 42, count: 50_000)
        let objects = try ObjectStore(root: store.root)
        for (app, own) in [("shop", 1_000), ("news", 2_000)] {
            var zip = ZipBuilder()
            zip.file("vendor.js", vendor)
            zip.file("app.js", [UInt8](repeating: UInt8(own / 1000), count: own))
            try zip.write(to: scratch.file("\(app).zip"))
            try FileManager.default.createDirectory(atPath: store.versionsDirectory(app), withIntermediateDirectories: true)
            _ = try Self.extract(scratch.file("\(app).zip"), to: store.versionDirectory(app, Version("1.0.0")!), objects: objects)
        }
        let shop = store.versionDirectory("shop", Version("1.0.0")!), news = store.versionDirectory("news", Version("1.0.0")!)
        #expect(Self.inode("\(shop)/vendor.js")!.ino == Self.inode("\(news)/vendor.js")!.ino)
        let usage = store.diskUsage("shop")
        #expect(usage.shared == 50_000)
        #expect(usage.alone == 1_000)
        #expect(usage.versions == 51_000)
        #expect(usage.store == 53_000)
        #expect(store.diskUsage("news").alone == 2_000)
    }

    @Test("status and status --json report the app's own, shared and store bytes")
    func statusReportsSharing() async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        try await h.install("1.1.0")
        let usage = h.store.diskUsage("mall")
        let distinct = Set(Self.files("1.0.0").values).union(Self.files("1.1.0").values).reduce(Int64(0)) { $0 + Int64($1.count) }
        #expect(usage.store == distinct, "each content stored once for both versions")
        #expect(usage.alone + usage.shared == usage.versions)
        #expect(usage.shared == 0, "no other app")
        let json = try await CLI.run(["status", "--root", h.root.path, "--app", "mall", "--json"])
        let disk = try #require(CLI.json(json.stdout)?["diskBytes"] as? [String: Any])
        #expect((disk["store"] as? NSNumber)?.int64Value == distinct)
        #expect((disk["alone"] as? NSNumber)?.int64Value == usage.alone)
        #expect((disk["shared"] as? NSNumber)?.int64Value == 0)
        #expect((disk["packageZips"] as? NSNumber)?.intValue == 0)
        let text = try await CLI.run(["status", "--root", h.root.path])
        #expect(text.stdout.contains("object store \(distinct) bytes"), "\(text.stdout)")
    }

    @Test("an unprivileged agent collects sealed (0555) version trees and their objects")
    func unprivilegedCollection() async throws {
        // Dropping to nobody needs root; without CAP_DAC_OVERRIDE, unlinking inside a 0555
        // directory fails unless the collector unseals it first.
        guard getuid() == 0, FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv") else { return }
        let h = try SyncHarness()
        let scratch = TemporaryDirectory("nobody")
        let root = scratch.file("root")
        #expect(chmod(scratch.path, 0o755) == 0 && mkdir(root, 0o755) == 0 && chown(root, 65534, 65534) == 0)
        for version in ["1.0.0", "1.1.0", "1.2.0"] {
            h.origin.setManifest(h.full(version))
            let run = try await CLI.run(
                ["--reuid=65534", "--regid=65534", "--clear-groups", CLI.binary, "sync", "--root", root, "--app", "mall",
                 "--manifest", h.origin.manifestURL.absoluteString, "--force", "--allow-unsigned"],
                executable: "/usr/bin/setpriv")
            #expect(run.status == 0, "\(run.stderr)")
        }
        let versions = try FileManager.default.contentsOfDirectory(atPath: "\(root)/apps/mall/versions").sorted()
        #expect(versions == ["1.1.0", "1.1.0.json", "1.2.0", "1.2.0.json"], "1.0.0 collected by nobody")
        for name in try FileManager.default.contentsOfDirectory(atPath: "\(root)/objects") {
            #expect((Self.inode("\(root)/objects/\(name)")?.links ?? 0) >= 2, "\(name) is linked")
        }
        #expect(Self.mode("\(root)/apps/mall/versions/1.2.0") == 0o555)
    }

    @Test("objects on another file system than the versions: files copied, tree whole, fallback reported")
    func noHardLinks() async throws {
        let scratch = TemporaryDirectory("objects")
        let objectsMount = scratch.file("objects")
        try FileManager.default.createDirectory(atPath: objectsMount, withIntermediateDirectories: true)
        guard (try? await run("mount", ["-t", "tmpfs", "-o", "size=8m", "tmpfs", objectsMount]))?.status == 0 else {
            Issue.record("cannot mount a tmpfs here (needs root/CAP_SYS_ADMIN)")
            return
        }
        defer { _ = try? runOnThisThread("umount", ["-l", objectsMount]) }  // blocking: a lazy unmount, a moment
        let fixture = try PackageFixture()
        let objects = try ObjectStore(root: scratch.path)
        let summary = try Self.extract(fixture.package("1.0.0"), to: scratch.file("v"), objects: objects)
        #expect(objects.copiedInsteadOfLinking)
        #expect(summary.written == summary.bytes)
        #expect(CrashSafetyTests.tree(of: scratch.file("v"), equals: "\(Repo.fixtures)/sample-app/1.0.0"))
    }

    static let storePoints: [CrashPoint] = [.afterObjectWritten, .afterObjectStored, .afterObjectLinked, .beforeTreeRename]

    /// A full install: extraction writes objects (a patch update streams them: StreamedPatchTests).
    @Test("kill -9 at each object-store step: old or new whole, then no garbage left", arguments: storePoints.map(\.rawValue))
    func killAtStoreStep(_ point: String) async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        h.origin.setManifest(h.full("1.1.0"))
        let args = [
            "sync", "--root", h.root.path, "--app", "mall", "--manifest", h.origin.manifestURL.absoluteString, "--force", "--json",
            "--allow-unsigned",
        ]
        let crashed = try await CLI.run(args, environment: ["OFFLINE_AGENT_CRASH_AT": point])
        #expect(crashed.signaled && crashed.status == SIGKILL, "the process should die at \(point): \(crashed.stderr)")
        #expect(h.activeMatches("1.0.0"), "the old version is whole after a crash at \(point)")
        let next = try await CLI.run(args)
        #expect(next.status == 0, "\(next.stderr)")
        #expect(h.activeMatches("1.1.0"))
        // The crashed run's objects are either linked by the new version or collected.
        let objects = h.store.objectsDirectory
        for name in try FileManager.default.contentsOfDirectory(atPath: objects) {
            #expect(!name.hasPrefix("."), "leftover \(name)")
            #expect((Self.inode("\(objects)/\(name)")?.links ?? 0) >= 2, "\(name) is linked by a kept version")
        }
        let old = h.store.versionDirectory("mall", Version("1.0.0")!), new = h.store.versionDirectory("mall", Version("1.1.0")!)
        #expect(CrashSafetyTests.tree(of: old, equals: "\(Repo.fixtures)/sample-app/1.0.0"))
        #expect(CrashSafetyTests.tree(of: new, equals: "\(Repo.fixtures)/sample-app/1.1.0"))
    }
}
