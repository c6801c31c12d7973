import Foundation
import Testing
@testable import OfflineAgent
import TestSupport

/// Entry names are bounded in length, component length and depth, checked for every
/// entry before anything is written; names that one file system would merge are
/// refused; deep trees the agent made (with raised limits) are written and removed.
@Suite("Path limits", .serialized)
struct PathLimitTests {
    struct Case: CustomTestStringConvertible, Sendable {
        var label: String
        /// Entry names, each holding "x"; a trailing "/" makes a directory.
        var names: [String]
        var limits = ExtractionLimits()
        /// A fragment of the refusal's reason; nil when the archive must be accepted.
        var refusal: String?
        var testDescription: String { label }
    }

    static let deep4000 = Array(repeating: "d", count: 4000).joined(separator: "/") + "/f.txt"
    static let raised = ExtractionLimits(maxNameBytes: 1 << 20, maxComponentBytes: 255, maxDepth: 100_000)
    /// "é" as one code point and as e + combining acute accent.
    static let nfc = "caf\u{E9}.txt", nfd = "cafe\u{301}.txt"

    /// Four components separated by "/" holding `bytes` bytes in all (components ≤ 255 bytes).
    static func name(_ bytes: Int) -> String {
        let each = bytes / 4
        return [each, each, each, bytes - 3 * each].map { String(repeating: "n", count: $0) }.joined(separator: "/")
    }

    static let cases: [Case] = [
        Case(label: "name of 1025 bytes", names: ["ok.txt", String(repeating: "a/", count: 20) + name(981 + 1)], refusal: "bytes long"),
        Case(label: "name of 1024 bytes is accepted", names: ["ok.txt", String(repeating: "a/", count: 20) + name(981)]),
        Case(label: "component of 256 bytes", names: ["ok.txt", "dir/" + String(repeating: "c", count: 256)],
             refusal: "component of 256 bytes"),
        Case(label: "component of 255 bytes is accepted", names: ["dir/" + String(repeating: "c", count: 255)]),
        Case(label: "component of 86 three-byte characters (258 bytes)", names: [String(repeating: "\u{4E2D}", count: 86)],
             refusal: "component of 258 bytes"),
        Case(label: "component of 85 three-byte characters is accepted", names: [String(repeating: "\u{4E2D}", count: 85)]),
        Case(label: "65 levels", names: ["ok.txt", Array(repeating: "l", count: 64).joined(separator: "/") + "/f"],
             refusal: "65 levels deep"),
        Case(label: "64 levels are accepted", names: [Array(repeating: "l", count: 63).joined(separator: "/") + "/f"]),
        Case(label: "64 KB name", names: ["ok.txt", String(repeating: "z/", count: 32_000) + "f"], refusal: "bytes long"),
        Case(label: "4000 levels under the default limits", names: ["ok.txt", deep4000], refusal: "bytes long"),
        Case(label: "4000 levels under a raised byte limit", names: ["ok.txt", deep4000],
             limits: ExtractionLimits(maxNameBytes: 1 << 20), refusal: "4001 levels deep"),
        Case(label: "long name after many good entries", names: (0..<200).map { "f\($0).txt" } + [String(repeating: "q", count: 2000)],
             refusal: "bytes long"),
        Case(label: "directories differing in case", names: ["Assets/a.js", "assets/b.js"], refusal: "only in case"),
        Case(label: "NFC and NFD spellings of one name", names: [nfc, nfd], refusal: "Unicode normalisation"),
        Case(label: "percent escapes are names, not paths", names: ["a%2F..%2Fb.txt", "%2e%2e/x.txt"]),
    ]

    @Test("names beyond the limits are refused whole; names at them extract", arguments: cases)
    func limits(_ c: Case) throws {
        let scratch = TemporaryDirectory("limits")
        var zip = ZipBuilder()
        for name in c.names {
            if name.hasSuffix("/") { zip.directory(name) } else { zip.file(name, "x") }
        }
        try zip.write(to: scratch.file("a.zip"))
        let out = scratch.file("out")
        do {
            try ZipExtractor.extract(archive: URL(fileURLWithPath: scratch.file("a.zip")), to: URL(fileURLWithPath: out), limits: c.limits)
            #expect(c.refusal == nil, "accepted, expected a refusal containing '\(c.refusal ?? "")'")
            for name in c.names where !name.hasSuffix("/") {
                #expect(FileManager.default.contents(atPath: "\(out)/\(name)") == Data("x".utf8), "\(name.prefix(60))")
            }
        } catch let error as OfflineAgentError {
            let refusal = try #require(c.refusal, "refused: \(error)")
            #expect(error.code == .extract)
            #expect(error.cause == .hostileArchive, "\(error)")
            #expect(error.reason.contains(refusal), "\(error.reason)")
            // The reason stays one readable line however long the name.
            #expect(error.reason.utf8.count < 600)
            #expect(tree(scratch.path) == ["a.zip"], "refused whole: nothing written, no staging directory")
        }
    }

    @Test("a tree deeper than PATH_MAX extracts under raised limits and is removed by descriptors")
    func deepTreeExtractsAndGoes() throws {
        let scratch = TemporaryDirectory("deep")
        var zip = ZipBuilder()
        let deep = Array(repeating: "dddddddd", count: 800).joined(separator: "/")  // 7199 bytes > PATH_MAX
        zip.file(deep + "/leaf.txt", "leaf")
        zip.file("top.txt", "top")
        try zip.write(to: scratch.file("a.zip"))
        let summary = try ZipExtractor.extract(archive: URL(fileURLWithPath: scratch.file("a.zip")),
                                               to: scratch.url.appendingPathComponent("out"), limits: Self.raised)
        #expect(summary.files == 2 && summary.directories == 800)
        #expect(try DeepTree.read(scratch.file("out"), components: Array(repeating: "dddddddd", count: 800), file: "leaf.txt") == "leaf")
        try FileSystem.removeTree(scratch.file("out"))
        #expect(tree(scratch.path) == ["a.zip"])
    }

    @Test("a refused archive with a deep tree already written leaves no .extract-* behind")
    func refusedDeepArchiveLeavesNothing() throws {
        let scratch = TemporaryDirectory("deep")
        var zip = ZipBuilder()
        let deep = Array(repeating: "eeeeeeee", count: 800).joined(separator: "/")
        zip.file(deep + "/good.txt", "good")
        // Damage found only while writing: the deep directories exist by then.
        zip.file("bad.txt", "hello world")
        zip.entries[1].crc ^= 1
        try zip.write(to: scratch.file("a.zip"))
        let error = #expect(throws: OfflineAgentError.self) {
            try ZipExtractor.extract(archive: URL(fileURLWithPath: scratch.file("a.zip")),
                                     to: scratch.url.appendingPathComponent("out"), limits: Self.raised)
        }
        #expect(error?.cause == .archiveCorrupt)
        #expect(tree(scratch.path) == ["a.zip"], "no staging directory left")
    }

    @Test("the extractor opens no descriptor it does not close")
    func noDescriptorLeak() throws {
        let scratch = TemporaryDirectory("fds")
        var zip = ZipBuilder()
        for i in 0..<50 { zip.file("a/b\(i % 7)/c\(i % 3)/d/f\(i).txt", "\(i)") }
        try zip.write(to: scratch.file("a.zip"))
        let before = DeepTree.openDescriptors()
        for round in 0..<40 {
            try ZipExtractor.extract(archive: URL(fileURLWithPath: scratch.file("a.zip")), to: scratch.url.appendingPathComponent("out\(round)"))
        }
        // The count is the whole process's and other suites open sockets meanwhile: allow
        // that noise, far below the ~2000 descriptors 40 rounds of 50 directories would leak.
        #expect(DeepTree.openDescriptors() <= before + 300)
        #expect(FileManager.default.contents(atPath: scratch.file("out39/a/b0/c1/d/f49.txt")) == Data("49".utf8))
    }
}
