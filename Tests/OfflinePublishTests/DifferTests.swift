import Foundation
import Testing

@testable import OfflineAgent
import TestSupport
@testable import OfflinePublish

/// Differ's patches must apply with Debian's reference `bspatch` to the exact new file,
/// and be no bigger than the reference `bsdiff`'s (same algorithm).
@Suite struct DifferTests {
    static let bspatch = "/usr/bin/bspatch"
    static let bsdiff = "/usr/bin/bsdiff"
    static let haveBspatch = FileManager.default.isExecutableFile(atPath: bspatch)
    static let haveBsdiff = FileManager.default.isExecutableFile(atPath: bsdiff)

    // MARK: - Round trips through the reference bspatch

    @Test(.enabled(if: haveBspatch && haveBsdiff, "needs Debian's bsdiff package"))
    func webBundlePairAppliesAndIsNoBiggerThanReference() async throws {
        let dir = try DifferTestDir()
        let old = dir.url("v1.zip"), new = dir.url("v2.zip")
        try DifferTestZip.data(entries: DifferTestBundle.files(version: 1)).write(to: old)
        try DifferTestZip.data(entries: DifferTestBundle.files(version: 2)).write(to: new)

        let patch = dir.url("v1-v2.bsdiff")
        try Differ.makePatch(from: old, to: new, writingTo: patch)
        try await expectRoundTrip(old: old, new: new, patch: patch, in: dir)

        let reference = dir.url("reference.bsdiff")
        try await run(Self.bsdiff, old.path, new.path, reference.path)
        let ours = try fileSize(patch), theirs = try fileSize(reference)
        #expect(Double(ours) <= 1.1 * Double(theirs), "patch \(ours) bytes vs reference \(theirs)")
        // Far below the new bundle's size: the pair really shares content.
        let newSize = try fileSize(new)
        #expect(ours < newSize / 4)
    }

    /// The committed sample app (fixtures/sample-app/<version>/), when present.
    static let sampleApp = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("fixtures/sample-app")
    static let haveSampleApp = FileManager.default.fileExists(atPath: sampleApp.appendingPathComponent("1.3.0").path)

    @Test(.enabled(if: haveBspatch && haveBsdiff && haveSampleApp, "needs bsdiff and fixtures/sample-app"))
    func sampleAppReleasesApplyAndAreNoBiggerThanReference() async throws {
        let dir = try DifferTestDir()
        let versions = ["1.0.0", "1.1.0", "1.2.0", "1.3.0"]
        for version in versions {
            let files = try Self.tree(Self.sampleApp.appendingPathComponent(version))
            #expect(files.count >= 6, "sample app \(version) has \(files.count) files")
            try DifferTestZip.data(entries: files).write(to: dir.url("\(version).zip"))
        }
        for (from, to) in zip(versions, versions.dropFirst()) + [("1.0.0", "1.3.0")] {
            let old = dir.url("\(from).zip"), new = dir.url("\(to).zip")
            let patch = dir.url("\(from)-\(to).bsdiff"), reference = dir.url("\(from)-\(to).ref")
            try Differ.makePatch(from: old, to: new, writingTo: patch)
            try await expectRoundTrip(old: old, new: new, patch: patch, in: dir)
            try await run(Self.bsdiff, old.path, new.path, reference.path)
            let ours = try fileSize(patch), theirs = try fileSize(reference)
            #expect(Double(ours) <= 1.1 * Double(theirs), "\(from)→\(to): \(ours) bytes vs reference \(theirs)")
        }
    }

    /// README's claim: the native bsdiff writes the very bytes Debian's `bsdiff` writes
    /// (same suffix sort, same scan, same bzip2 streams), for real release pairs and
    /// for synthetic ones (identical, unrelated, shifted). An empty old file is left
    /// out: Debian's `bsdiff` cannot `mmap` it.
    @Test(.enabled(if: haveBsdiff && haveSampleApp, "needs bsdiff and fixtures/sample-app"))
    func patchIsByteIdenticalToDebianBsdiff() async throws {
        let dir = try DifferTestDir()
        var pairs: [(String, Data, Data)] = []
        let versions = ["1.0.0", "1.1.0", "1.2.0", "1.3.0"]
        var zips: [String: Data] = [:]
        for version in versions {
            zips[version] = try DifferTestZip.data(entries: try Self.tree(Self.sampleApp.appendingPathComponent(version)))
        }
        for (from, to) in zip(versions, versions.dropFirst()) + [("1.0.0", "1.3.0")] {
            pairs.append(("\(from)→\(to)", zips[from]!, zips[to]!))
        }
        let text = DifferTestBundle.text(seed: 21, bytes: 40_000)
        pairs.append(("web bundle v1→v2", try DifferTestZip.data(entries: DifferTestBundle.files(version: 1)),
                      try DifferTestZip.data(entries: DifferTestBundle.files(version: 2))))
        pairs.append(("identical", text, text))
        pairs.append(("shifted", text, Data("prefix inserted".utf8) + text))
        pairs.append(("unrelated", text, DifferTestBundle.text(seed: 22, bytes: 30_000)))
        for (label, oldBytes, newBytes) in pairs {
            let old = dir.url("old"), new = dir.url("new"), ours = dir.url("ours"), theirs = dir.url("theirs")
            try oldBytes.write(to: old)
            try newBytes.write(to: new)
            try? FileManager.default.removeItem(at: ours)
            try Differ.makePatch(from: old, to: new, writingTo: ours)
            try await run(Self.bsdiff, old.path, new.path, theirs.path)
            let a = try Data(contentsOf: ours), b = try Data(contentsOf: theirs)
            #expect(a == b, "\(label): ours \(a.count) bytes, Debian's \(b.count) bytes")
        }
    }

    /// The regular files under `root`, by relative path in byte order, like `find | LC_ALL=C sort`.
    private static func tree(_ root: URL) throws -> [(String, Data)] {
        let base = root.standardizedFileURL.path
        guard let walker = FileManager.default.enumerator(atPath: base) else { return [] }
        var files: [(String, Data)] = []
        for case let relative as String in walker {
            let url = URL(fileURLWithPath: base).appendingPathComponent(relative)
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: url.path, isDirectory: &isDirectory), !isDirectory.boolValue {
                files.append((relative, try Data(contentsOf: url)))
            }
        }
        return files.sorted { Array($0.0.utf8).lexicographicallyPrecedes(Array($1.0.utf8)) }
    }

    @Test(.enabled(if: haveBspatch, "needs Debian's bspatch"))
    func emptyOldFile() async throws {
        let dir = try DifferTestDir()
        let old = dir.url("old"), new = dir.url("new")
        try Data().write(to: old)
        try DifferTestBundle.text(seed: 7, bytes: 200_000).write(to: new)
        let patch = dir.url("patch")
        try Differ.makePatch(from: old, to: new, writingTo: patch)
        try await expectRoundTrip(old: old, new: new, patch: patch, in: dir)
    }

    @Test(.enabled(if: haveBspatch, "needs Debian's bspatch"))
    func emptyNewFile() async throws {
        let dir = try DifferTestDir()
        let old = dir.url("old"), new = dir.url("new")
        try DifferTestBundle.text(seed: 8, bytes: 200_000).write(to: old)
        try Data().write(to: new)
        let patch = dir.url("patch")
        try Differ.makePatch(from: old, to: new, writingTo: patch)
        try await expectRoundTrip(old: old, new: new, patch: patch, in: dir)
    }

    @Test(.enabled(if: haveBspatch, "needs Debian's bspatch"))
    func bothFilesEmpty() async throws {
        let dir = try DifferTestDir()
        let old = dir.url("old"), new = dir.url("new")
        try Data().write(to: old)
        try Data().write(to: new)
        let patch = dir.url("patch")
        try Differ.makePatch(from: old, to: new, writingTo: patch)
        try await expectRoundTrip(old: old, new: new, patch: patch, in: dir)
    }

    @Test(.enabled(if: haveBspatch, "needs Debian's bspatch"))
    func identicalFiles() async throws {
        let dir = try DifferTestDir()
        let old = dir.url("old"), new = dir.url("new")
        let content = try DifferTestZip.data(entries: DifferTestBundle.files(version: 1))
        try content.write(to: old)
        try content.write(to: new)
        let patch = dir.url("patch")
        try Differ.makePatch(from: old, to: new, writingTo: patch)
        try await expectRoundTrip(old: old, new: new, patch: patch, in: dir)
        // One control tuple and runs of zero bytes: a few hundred bytes at most.
        #expect(try fileSize(patch) < 1_000)
    }

    @Test(.enabled(if: haveBspatch, "needs Debian's bspatch"))
    func multiMegabyteRandomPairWithEdits() async throws {
        let dir = try DifferTestDir()
        var rng = SplitMix64(seed: 0xB5D1FF)
        let base = rng.bytes(4 << 20)
        var edited = base
        // Replacements, insertions and deletions scattered over the file, plus a moved block.
        for _ in 0..<300 {
            let at = Int(rng.next() % UInt64(edited.count - 5_000))
            let cut = Int(rng.next() % 600)
            let insert = rng.bytes(Int(rng.next() % 700))
            edited.replaceSubrange(at..<(at + cut), with: insert)
        }
        let block = Array(edited[100_000..<400_000])
        edited.removeSubrange(100_000..<400_000)
        edited.insert(contentsOf: block, at: edited.count - 200_000)

        let old = dir.url("old.bin"), new = dir.url("new.bin")
        try Data(base).write(to: old)
        try Data(edited).write(to: new)
        let patch = dir.url("patch")
        try Differ.makePatch(from: old, to: new, writingTo: patch)
        try await expectRoundTrip(old: old, new: new, patch: patch, in: dir)
        // Random bytes do not compress: the patch is about the inserted bytes (~100 KB).
        #expect(try fileSize(patch) < 400_000)
    }

    @Test(.enabled(if: haveBspatch, "needs Debian's bspatch"))
    func replacesExistingPatchFile() async throws {
        let dir = try DifferTestDir()
        let old = dir.url("old"), new = dir.url("new"), patch = dir.url("patch")
        try DifferTestBundle.text(seed: 1, bytes: 50_000).write(to: old)
        try DifferTestBundle.text(seed: 2, bytes: 50_000).write(to: new)
        try Data("stale".utf8).write(to: patch)
        try Differ.makePatch(from: old, to: new, writingTo: patch)
        try await expectRoundTrip(old: old, new: new, patch: patch, in: dir)
        #expect(try dir.contents().sorted() == ["new", "new.applied", "old", "patch"])
    }

    // MARK: - Failures

    @Test func missingOldFileThrowsAndLeavesNothing() throws {
        let dir = try DifferTestDir()
        let new = dir.url("new")
        try DifferTestBundle.text(seed: 3, bytes: 10_000).write(to: new)
        let out = dir.url("out")
        try FileManager.default.createDirectory(at: out, withIntermediateDirectories: false)

        let error = #expect(throws: PublishError.self) {
            try Differ.makePatch(from: dir.url("missing"), to: new, writingTo: out.appendingPathComponent("p"))
        }
        #expect(error?.code == .publish)
        #expect(error?.reason.contains("missing") == true)
        #expect(try FileManager.default.contentsOfDirectory(atPath: out.path).isEmpty)
    }

    @Test func missingNewFileThrows() throws {
        let dir = try DifferTestDir()
        let old = dir.url("old")
        try DifferTestBundle.text(seed: 4, bytes: 10_000).write(to: old)
        let error = #expect(throws: PublishError.self) {
            try Differ.makePatch(from: old, to: dir.url("missing"), writingTo: dir.url("p"))
        }
        #expect(error?.code == .publish)
        #expect(try dir.contents() == ["old"])
    }

    @Test func unwritableOutputDirectoryThrowsAndLeavesNothing() async throws {
        let dir = try DifferTestDir()
        let old = dir.url("old"), new = dir.url("new")
        try DifferTestBundle.text(seed: 5, bytes: 10_000).write(to: old)
        try DifferTestBundle.text(seed: 6, bytes: 10_000).write(to: new)

        // A directory that does not exist, and a "directory" that is a regular file:
        // both unwritable even for root.
        for target in [dir.url("absent/p"), dir.url("old/p")] {
            let error = #expect(throws: PublishError.self) {
                try Differ.makePatch(from: old, to: new, writingTo: target)
            }
            #expect(error?.code == .publish)
        }
        #expect(try dir.contents().sorted() == ["new", "old"])

        // A read-only directory: permission bits stop everyone but root, so as root (how
        // CI runs) it is a read-only tmpfs, which stops root too.
        let locked = dir.url("locked")
        try FileManager.default.createDirectory(at: locked, withIntermediateDirectories: false)
        var mounted = false
        if geteuid() == 0 {
            mounted = (try? await TestSupport.run("mount", ["-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", locked.path]))?.status == 0
            try #require(mounted, "cannot mount a read-only tmpfs as root")
        } else {
            try FileManager.default.setAttributes([.posixPermissions: 0o555], ofItemAtPath: locked.path)
        }
        defer {
            if mounted { _ = try? runOnThisThread("umount", ["-l", locked.path]) }  // blocking: a lazy unmount, a moment
            try? FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: locked.path)
        }
        let lockedError = #expect(throws: PublishError.self) {
            try Differ.makePatch(from: old, to: new, writingTo: locked.appendingPathComponent("p"))
        }
        #expect(lockedError?.code == .publish)
        #expect(try FileManager.default.contentsOfDirectory(atPath: locked.path).isEmpty)
    }

    @Test func outputIsADirectoryThrowsAndLeavesNoTempFile() throws {
        let dir = try DifferTestDir()
        let old = dir.url("old"), new = dir.url("new"), target = dir.url("taken")
        try DifferTestBundle.text(seed: 9, bytes: 10_000).write(to: old)
        try DifferTestBundle.text(seed: 10, bytes: 10_000).write(to: new)
        try FileManager.default.createDirectory(at: target, withIntermediateDirectories: false)
        try Data().write(to: target.appendingPathComponent("keep"))
        // The rename at the very end fails: the finished temporary file must go.
        let error = #expect(throws: PublishError.self) {
            try Differ.makePatch(from: old, to: new, writingTo: target)
        }
        #expect(error?.code == .publish)
        #expect(try dir.contents().sorted() == ["new", "old", "taken"])
    }

    // MARK: - Helpers

    /// Applies `patch` with the reference bspatch and checks the result is exactly `new`.
    private func expectRoundTrip(old: URL, new: URL, patch: URL, in dir: DifferTestDir) async throws {
        let applied = dir.url(new.lastPathComponent + ".applied")
        try await run(Self.bspatch, old.path, applied.path, patch.path)
        let expected = try Data(contentsOf: new), actual = try Data(contentsOf: applied)
        #expect(actual.count == expected.count)
        #expect(actual == expected, "bspatch output differs from the new file")
    }

    private func fileSize(_ url: URL) throws -> Int {
        try FileManager.default.attributesOfItem(atPath: url.path)[.size] as? Int ?? -1
    }

    private func run(_ executable: String, _ arguments: String...) async throws {
        let result = try await CLI.run(arguments, executable: executable)
        guard result.status == 0 else {
            throw DifferToolFailure(description: "\(executable) exited \(result.status): \(result.stderr)")
        }
    }
}

private struct DifferToolFailure: Error, CustomStringConvertible {
    let description: String
}

/// A fresh directory under the system temporary directory, removed when dropped.
private final class DifferTestDir {
    let root: URL

    init() throws {
        root = FileManager.default.temporaryDirectory
            .appendingPathComponent("DifferTests-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(at: root) }

    func url(_ name: String) -> URL { root.appendingPathComponent(name) }

    func contents() throws -> [String] { try FileManager.default.contentsOfDirectory(atPath: root.path) }
}

/// Helpers over the suite's deterministic generator, so failures reproduce.
extension SplitMix64 {
    mutating func bytes(_ count: Int) -> [UInt8] {
        var out = [UInt8]()
        out.reserveCapacity(count + 8)
        while out.count < count {
            withUnsafeBytes(of: next().littleEndian) { out.append(contentsOf: $0) }
        }
        out.removeLast(out.count - count)
        return out
    }

    mutating func below(_ n: Int) -> Int { Int(next() % UInt64(n)) }

    mutating func pick<T>(_ items: [T]) -> T { items[below(items.count)] }
}

/// Generates two versions of a plausible single-page web app: a vendor bundle that
/// mostly stays, an app bundle whose modules are edited, added and removed, a style
/// sheet, an HTML shell referring to content-hashed names, and a few binary assets.
private enum DifferTestBundle {
    static let words = [
        "state", "props", "render", "update", "value", "items", "index", "config", "options", "handler",
        "element", "context", "request", "response", "payload", "session", "widget", "layout", "theme",
        "cache", "events", "listener", "children", "component", "effect", "memo", "store", "action",
        "dispatch", "reducer", "selector", "router", "route", "params", "query", "fetch", "stream",
        "buffer", "format", "parse", "schema", "field", "record", "table", "column", "row", "cell",
    ]

    static func files(version: Int) -> [(String, Data)] {
        // Module bodies are fixed by their number; a version picks which ones it ships
        // and edits some, as a real release does.
        var appModules: [String] = []
        for module in 0..<3_000 {
            var local = SplitMix64(seed: UInt64(module) &* 7919 &+ 1)
            if version == 2, module % 37 == 5 { continue }  // removed modules
            var body = jsModule(id: module, rng: &local)
            if version == 2, module % 11 == 3 {  // edited modules
                var edit = SplitMix64(seed: UInt64(module) &+ 99)
                body = body.replacingOccurrences(of: "return", with: "return /* v2 */")
                body += jsModule(id: module + 10_000, rng: &edit)
            }
            appModules.append(body)
            if version == 2, module % 53 == 17 {  // new modules
                var fresh = SplitMix64(seed: UInt64(module) &+ 5_000_000)
                appModules.append(jsModule(id: module + 20_000, rng: &fresh))
            }
        }
        let app = Data(appModules.joined(separator: "\n").utf8)

        var vendorModules: [String] = []
        for module in 0..<4_000 {
            var local = SplitMix64(seed: UInt64(module) &+ 777_777)
            vendorModules.append(jsModule(id: module + 50_000, rng: &local))
        }
        if version == 2 { vendorModules.insert("/*! vendor build 2 */", at: 0) }
        let vendor = Data(vendorModules.joined(separator: "\n").utf8)

        var css = ""
        for rule in 0..<900 {
            var local = SplitMix64(seed: UInt64(rule) &+ 31_337)
            let color = version == 2 && rule % 50 == 0 ? "#ff6600" : String(format: "#%06x", local.below(0xFFFFFF))
            css += ".c\(rule)-\(local.pick(words)) { color: \(color); margin: \(local.below(32))px \(local.below(32))px; display: \(local.pick(["flex", "block", "grid", "inline-block"])); }\n"
        }
        let style = Data(css.utf8)

        let appName = "assets/app.\(hash(app)).js", vendorName = "assets/vendor.\(hash(vendor)).js"
        let styleName = "assets/style.\(hash(style)).css"
        let html = """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8"><title>Sample app v\(version)</title>
            <link rel="stylesheet" href="/\(styleName)"></head>
            <body><div id="root"></div>
            <script type="module" src="/\(vendorName)"></script>
            <script type="module" src="/\(appName)"></script></body></html>
            """

        var files: [(String, Data)] = [
            ("index.html", Data(html.utf8)),
            (appName, app),
            (vendorName, vendor),
            (styleName, style),
        ]
        // Binary assets: already-compressed images look random; one changes in v2.
        for image in 0..<6 {
            var local = SplitMix64(seed: UInt64(image) &+ (version == 2 && image == 2 ? 1_000 : 0) &+ 123)
            files.append(("assets/img\(image).png", Data(local.bytes(40_000 + image * 15_000))))
        }
        return files.sorted { $0.0 < $1.0 }
    }

    static func jsModule(id: Int, rng: inout SplitMix64) -> String {
        var out = "function m\(id)(\(rng.pick(words)), \(rng.pick(words))) {\n"
        for _ in 0..<(4 + rng.below(12)) {
            let a = rng.pick(words), b = rng.pick(words), c = rng.pick(words)
            switch rng.below(4) {
            case 0: out += "  const \(a)\(rng.below(100)) = \(b).\(c)(\(rng.below(1000)));\n"
            case 1: out += "  if (\(a) && \(b).length > \(rng.below(50))) { return \(c); }\n"
            case 2: out += "  \(a).\(b) = { \(c): \"\(rng.pick(words))-\(rng.below(9999))\" };\n"
            default: out += "  for (let i = 0; i < \(a).length; i++) \(b)[i] = \(c)(i);\n"
            }
        }
        return out + "  return \(rng.pick(words));\n}\n"
    }

    static func text(seed: UInt64, bytes: Int) -> Data {
        var rng = SplitMix64(seed: seed)
        var out = ""
        var id = 0
        while out.utf8.count < bytes {
            out += jsModule(id: id, rng: &rng)
            id += 1
        }
        return Data(out.utf8.prefix(bytes))
    }

    /// Content hash for file names, like bundlers do.
    static func hash(_ data: Data) -> String {
        String(format: "%08x", DifferTestZip.crc32(data))
    }
}

/// Writes zip archives with stored (uncompressed) entries, like `zip -0 -X`, so the
/// bundles' bytes stay visible to the differ.
private enum DifferTestZip {
    static func data(entries: [(String, Data)]) throws -> Data {
        var out = Data(), central = Data()
        for (name, content) in entries {
            let nameBytes = Data(name.utf8)
            let crc = crc32(content)
            let offset = UInt32(out.count)
            // Local file header.
            out.append(le32(0x0403_4B50))
            out.append(le16(10)); out.append(le16(0)); out.append(le16(0))  // version, flags, stored
            out.append(le16(0)); out.append(le16(0x21))  // time, date (1980-01-01)
            out.append(le32(crc)); out.append(le32(UInt32(content.count))); out.append(le32(UInt32(content.count)))
            out.append(le16(UInt16(nameBytes.count))); out.append(le16(0))
            out.append(nameBytes)
            out.append(content)
            // Central directory entry.
            central.append(le32(0x0201_4B50))
            central.append(le16(0x031E)); central.append(le16(10)); central.append(le16(0)); central.append(le16(0))
            central.append(le16(0)); central.append(le16(0x21))
            central.append(le32(crc)); central.append(le32(UInt32(content.count))); central.append(le32(UInt32(content.count)))
            central.append(le16(UInt16(nameBytes.count))); central.append(le16(0)); central.append(le16(0))
            central.append(le16(0)); central.append(le16(0)); central.append(le32(0o100644 << 16))
            central.append(le32(offset))
            central.append(nameBytes)
        }
        let centralOffset = UInt32(out.count)
        out.append(central)
        out.append(le32(0x0605_4B50))
        out.append(le16(0)); out.append(le16(0))
        out.append(le16(UInt16(entries.count))); out.append(le16(UInt16(entries.count)))
        out.append(le32(UInt32(central.count))); out.append(le32(centralOffset))
        out.append(le16(0))
        return out
    }

    static let table: [UInt32] = (0..<256).map { n in
        var c = UInt32(n)
        for _ in 0..<8 { c = c & 1 != 0 ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 }
        return c
    }

    static func crc32(_ data: Data) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in data { crc = table[Int((crc ^ UInt32(byte)) & 0xFF)] ^ (crc >> 8) }
        return crc ^ 0xFFFF_FFFF
    }

    static func le16(_ v: UInt16) -> Data { withUnsafeBytes(of: v.littleEndian) { Data($0) } }
    static func le32(_ v: UInt32) -> Data { withUnsafeBytes(of: v.littleEndian) { Data($0) } }
}
