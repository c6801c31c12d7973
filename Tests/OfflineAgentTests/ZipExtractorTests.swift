import Foundation
import Testing
@testable import OfflineAgent
import TestSupport

@Suite("ZipExtractor")
struct ZipExtractorTests {
    /// Packs a fixture version with Info-ZIP (stored or deflated) and extracts it.
    @Test("real packages extract byte-identically", arguments: ["-0", "-9"])
    func realPackage(level: String) async throws {
        let scratch = TemporaryDirectory("extract")
        let source = "\(Repo.fixtures)/sample-app/1.2.0"
        let zip = scratch.file("app.zip")
        let result = try await run("zip", ["-q", "-r", "-X", level, zip, "."], cwd: source)
        #expect(result.status == 0)
        let summary = try ZipExtractor.extract(archive: URL(fileURLWithPath: zip), to: scratch.url.appendingPathComponent("out"))
        #expect(summary.files == tree(source).filter { !FileSystem.isDirectory("\(source)/\($0)") }.count)
        #expect(tree(scratch.file("out")) == tree(source))
        for name in tree(source) where !FileSystem.isDirectory("\(source)/\(name)") {
            #expect(FileManager.default.contents(atPath: "\(source)/\(name)") == FileManager.default.contents(atPath: scratch.file("out/\(name)")))
        }
        // Nothing but the zip and the result beside them: no staging leftovers.
        #expect(tree(scratch.path).filter { !$0.contains("/") }.sorted() == ["app.zip", "out"])
    }

    @Test("setuid and setgid bits are dropped")
    func dropsSpecialBits() throws {
        let scratch = TemporaryDirectory("extract")
        var zip = ZipBuilder()
        zip.file("run.sh", Array("#!/bin/sh\n".utf8), mode: 0o106755)
        zip.file("data.txt", Array("x".utf8), mode: 0o102644)
        try zip.write(to: scratch.file("a.zip"))
        try ZipExtractor.extract(archive: URL(fileURLWithPath: scratch.file("a.zip")), to: scratch.url.appendingPathComponent("out"))
        let script = try FileManager.default.attributesOfItem(atPath: scratch.file("out/run.sh"))[.posixPermissions] as? Int
        let data = try FileManager.default.attributesOfItem(atPath: scratch.file("out/data.txt"))[.posixPermissions] as? Int
        #expect(script == 0o755)
        #expect(data == 0o644)
    }

    @Test("an existing destination is refused and kept")
    func existingDestination() throws {
        let scratch = TemporaryDirectory("extract")
        var zip = ZipBuilder()
        zip.file("a.txt", "a")
        try zip.write(to: scratch.file("a.zip"))
        try FileManager.default.createDirectory(atPath: scratch.file("out"), withIntermediateDirectories: false)
        try "keep".write(toFile: scratch.file("out/mine"), atomically: true, encoding: .utf8)
        #expect(throws: OfflineAgentError.self) {
            try ZipExtractor.extract(archive: URL(fileURLWithPath: scratch.file("a.zip")), to: scratch.url.appendingPathComponent("out"))
        }
        #expect(tree(scratch.file("out")) == ["mine"])
    }

    struct Hostile: CustomTestStringConvertible, Sendable {
        var label: String
        var reason: String
        /// Why it must be refused: an attack, or damage.
        var cause: OfflineAgentError.Cause = .hostileArchive
        var limits = ExtractionLimits()
        var make: @Sendable () -> ZipBuilder
        var testDescription: String { label }
    }

    static let hostile: [Hostile] = [
        Hostile(label: "absolute path", reason: "absolute") { one("/etc/evil.txt") },
        Hostile(label: "dot-dot", reason: "'..'") { one("../evil.txt") },
        Hostile(label: "nested dot-dot", reason: "'..'") { one("a/../../evil.txt") },
        Hostile(label: "dot component", reason: "'.'") { one("./a.txt") },
        Hostile(label: "empty component", reason: "empty component") { one("a//b.txt") },
        Hostile(label: "backslash", reason: "backslash") { one("..\\evil.txt") },
        // A separator or dot that a grapheme cluster folds into its neighbour is still one to
        // the kernel: these escaped the destination (or wrote at /) when names were split on Characters.
        Hostile(label: "dot-dot, its slash in a combining mark's cluster", reason: "'..'") { one("../\u{301}evil.txt") },
        Hostile(label: "directory dot-dot, its slash in a combining mark's cluster", reason: "'..'") { one("../\u{301}evil/") },
        Hostile(label: "absolute, its slash in a combining mark's cluster", reason: "absolute") { one("/\u{301}offline-agent-evil.txt") },
        Hostile(label: "dot-dot between slashes folded into a prepended and a combining mark", reason: "'..'") {
            one("a\u{600}/../\u{301}evil.txt")
        },
        Hostile(label: "backslash in a combining mark's cluster", reason: "backslash") { one("..\\\u{301}evil.txt") },
        Hostile(label: "NUL in a combining mark's cluster", reason: "NUL") { one("a\0\u{301}.txt") },
        Hostile(label: "NUL in name", reason: "NUL") {
            var zip = ZipBuilder()
            zip.file("ok.txt", "ok")
            zip.entries.append(ZipBuilder.Entry(name: Array("a\0.txt".utf8), payload: [0x61], crc: ZipBuilder.crc32([0x61]),
                                                compressedSize: 1, uncompressedSize: 1))
            return zip
        },
        Hostile(label: "duplicate name", reason: "duplicate") {
            var zip = ZipBuilder()
            zip.file("a.txt", "one")
            zip.file("a.txt", "two")
            return zip
        },
        Hostile(label: "names differing in case", reason: "duplicate") {
            var zip = ZipBuilder()
            zip.file("Index.html", "one")
            zip.file("index.html", "two")
            return zip
        },
        Hostile(label: "file and directory", reason: "both a file and a directory") {
            var zip = ZipBuilder()
            zip.file("js", "file")
            zip.file("js/app.js", "code")
            return zip
        },
        Hostile(label: "symlink", reason: "symbolic link") {
            var zip = ZipBuilder()
            zip.file("link", Array("/etc/passwd".utf8), mode: 0o120777)
            return zip
        },
        Hostile(label: "character device", reason: "device") {
            var zip = ZipBuilder()
            zip.file("dev", [], mode: 0o020644)
            return zip
        },
        Hostile(label: "fifo", reason: "device, fifo") {
            var zip = ZipBuilder()
            zip.file("pipe", [], mode: 0o010644)
            return zip
        },
        Hostile(label: "encrypted entry", reason: "encrypted") {
            var zip = ZipBuilder()
            zip.file("secret.txt", Array(repeating: 0x41, count: 40))
            zip.entries[0].flags |= 1
            return zip
        },
        Hostile(label: "unknown method", reason: "") {
            var zip = ZipBuilder()
            zip.file("a.txt", "abc")
            zip.entries[0].method = 99
            return zip
        },
        Hostile(label: "CRC error", reason: "CRC", cause: .archiveCorrupt) {
            var zip = ZipBuilder()
            zip.file("a.txt", Array(repeating: 0x42, count: 5000), deflate: true)
            zip.entries[0].crc ^= 0xdead_beef
            return zip
        },
        Hostile(label: "stored CRC error", reason: "CRC", cause: .archiveCorrupt) {
            var zip = ZipBuilder()
            zip.file("a.txt", "hello world")
            zip.entries[0].crc ^= 1
            return zip
        },
        Hostile(label: "local and central headers disagree", reason: "inconsistent") {
            var zip = ZipBuilder()
            zip.file("a.txt", "hello")
            zip.entries[0].localName = Array("b.txt".utf8)
            return zip
        },
        Hostile(label: "more bytes than declared", reason: "more bytes than") {
            var zip = ZipBuilder()
            let data = [UInt8](repeating: 0x43, count: 100_000)
            zip.file("a.txt", data, deflate: true)
            zip.entries[0].uncompressedSize = 10
            return zip
        },
        Hostile(label: "total above the cap", reason: "limit", limits: ExtractionLimits(maxTotalBytes: 1000, maxEntries: 100)) {
            var zip = ZipBuilder()
            zip.file("a.bin", [UInt8](repeating: 0, count: 600))
            zip.file("b.bin", [UInt8](repeating: 0, count: 600))
            return zip
        },
        Hostile(label: "too many entries", reason: "entries exceed", limits: ExtractionLimits(maxTotalBytes: 1 << 30, maxEntries: 3)) {
            var zip = ZipBuilder()
            for i in 0..<5 { zip.file("f\(i).txt", "x") }
            return zip
        },
        Hostile(label: "not a zip", reason: "central directory", cause: .archiveCorrupt) {
            var zip = ZipBuilder()
            zip.file("a.txt", "x")
            zip.entries.removeAll()
            return zip
        },
    ]

    static func one(_ name: String) -> ZipBuilder {
        var zip = ZipBuilder()
        zip.file("index.html", "<html></html>")
        zip.file(name, "evil")
        return zip
    }

    @Test("hostile archives are refused whole", arguments: hostile)
    func refusesHostile(_ case_: Hostile) throws {
        let scratch = TemporaryDirectory("hostile")
        let parent = scratch.file("deep")
        try FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true)
        var bytes = case_.make().build()
        if case_.label == "not a zip" { bytes = Array("this is not a zip archive at all".utf8) }
        try Data(bytes).write(to: URL(fileURLWithPath: scratch.file("a.zip")))
        try expectRefusal(zip: scratch.file("a.zip"), into: "\(parent)/out", limits: case_.limits, reason: case_.reason, cause: case_.cause)
        #expect(tree(scratch.path) == ["a.zip", "deep"], "nothing written inside or outside the destination")
    }

    @Test("a 2 GiB bomb of 2 MB is refused before inflating")
    func bomb() throws {
        let scratch = TemporaryDirectory("bomb")
        try expectRefusal(zip: "\(Repo.fixtures)/hostile/bomb-2gib.zip", into: scratch.file("out"), limits: ExtractionLimits(), reason: "limit", cause: .hostileArchive)
        #expect(tree(scratch.path).isEmpty)
    }

    @Test("a bomb lying about its size is cut at the declared size")
    func lyingBomb() throws {
        let scratch = TemporaryDirectory("bomb")
        var zip = ZipBuilder()
        zip.file("zeros.bin", [UInt8](repeating: 0, count: 8 << 20), deflate: true)
        zip.entries[0].uncompressedSize = 1 << 20
        try zip.write(to: scratch.file("a.zip"))
        try expectRefusal(zip: scratch.file("a.zip"), into: scratch.file("out"), limits: ExtractionLimits(), reason: "more bytes than", cause: .hostileArchive)
        #expect(tree(scratch.path) == ["a.zip"])
    }

    private func expectRefusal(zip: String, into destination: String, limits: ExtractionLimits, reason: String, cause: OfflineAgentError.Cause) throws {
        do {
            try ZipExtractor.extract(archive: URL(fileURLWithPath: zip), to: URL(fileURLWithPath: destination), limits: limits)
            Issue.record("archive was accepted")
        } catch let error as OfflineAgentError {
            #expect(error.code == .extract)
            #expect(error.cause == cause, "cause was \(error.cause.rawValue): \(error.reason)")
            if !reason.isEmpty { #expect(error.reason.contains(reason), "reason was: \(error.reason)") }
        }
        #expect(!FileSystem.exists(destination))
    }
}
