import Foundation
import Testing
@testable import OfflineAgent
import TestSupport
@testable import OfflinePublish

/// `publish` refuses every source tree whose package devices would refuse, naming the
/// offending path and leaving the publish directory as it was; and the same names in
/// a zip are refused by the device's extractor as `hostile-archive`: every extractor
/// refusal a file system can express has its publish-side twin.
///
/// Extractor refusals no file system can express, so a source tree cannot hold them:
/// absolute names, `..`, `.`, empty components and NUL (a directory listing never
/// yields them), exact duplicates (one directory holds a name once), a path that is
/// both a file and a directory (one path is one inode), encrypted entries and
/// unknown compression methods (publish writes neither), and a component over 255
/// bytes with the default limits (Linux file systems stop at NAME_MAX = 255, so that
/// row lowers the limit instead).
@Suite("Publish rules", .serialized)
struct PublishRulesTests {
    enum Node: Sendable {
        case file(String)
        case symlink(to: String)
        case fifo
    }

    struct Case: CustomTestStringConvertible, Sendable {
        var label: String
        /// Relative paths of the source tree; directories are implied.
        var nodes: [(String, Node)]
        var limits = ExtractionLimits()
        /// A fragment of both refusals' reasons; nil when the tree must publish and install.
        var refusal: String?
        /// The path the publish refusal must name, relative to the source.
        var offender: String?
        var testDescription: String { label }
    }

    /// "é" as one code point and as e + combining acute accent.
    static let nfc = "caf\u{E9}.html", nfd = "cafe\u{301}.html"
    static let deep65 = Array(repeating: "l", count: 64).joined(separator: "/") + "/f"
    static let deep64 = Array(repeating: "l", count: 63).joined(separator: "/") + "/f"
    /// `a/` × 20 then four components of `bytes` bytes in all (each ≤ 255 bytes).
    static func longName(_ total: Int) -> String {
        let rest = total - 40 - 3, each = rest / 4
        return String(repeating: "a/", count: 20)
            + [each, each, each, rest - 3 * each].map { String(repeating: "n", count: $0) }.joined(separator: "/")
    }

    static let cases: [Case] = [
        Case(label: "file names differing only in case", nodes: [("Index.html", .file("A")), ("index.html", .file("a"))],
             refusal: "only in case", offender: "index.html"),
        Case(label: "directories differing only in case", nodes: [("Assets/a.js", .file("a")), ("assets/b.js", .file("b"))],
             refusal: "only in case", offender: "assets/b.js"),
        // NFD sorts first (0x65 'e' < 0xC3), so the NFC spelling is the one refused.
        Case(label: "NFC and NFD spellings of é", nodes: [(nfc, .file("1")), (nfd, .file("2"))],
             refusal: "Unicode normalisation", offender: nfc),
        Case(label: "a symlink", nodes: [("index.html", .file("x")), ("passwd", .symlink(to: "/etc/passwd"))],
             refusal: "symbolic link", offender: "passwd"),
        Case(label: "a FIFO", nodes: [("index.html", .file("x")), ("pipe", .fifo)],
             refusal: "device, fifo or socket", offender: "pipe"),
        Case(label: "a name with a backslash", nodes: [("index.html", .file("x")), ("js\\app.js", .file("x"))],
             refusal: "backslash", offender: "js\\app.js"),
        Case(label: "a component above the (lowered) byte limit", nodes: [("index.html", .file("x")), ("d/" + String(repeating: "c", count: 17), .file("x"))],
             limits: ExtractionLimits(maxComponentBytes: 16), refusal: "component of 17 bytes", offender: "d/" + String(repeating: "c", count: 17)),
        Case(label: "65 levels", nodes: [("index.html", .file("x")), (deep65, .file("x"))],
             refusal: "65 levels deep", offender: deep65),
        Case(label: "a 1025-byte path", nodes: [("index.html", .file("x")), (longName(1025), .file("x"))],
             refusal: "1025 bytes long", offender: longName(1025)),
        Case(label: "too many entries", nodes: [("a", .file("1")), ("b", .file("2")), ("c", .file("3")), ("d", .file("4"))],
             limits: ExtractionLimits(maxEntries: 3), refusal: "entries exceed the limit of 3", offender: "d"),
        Case(label: "too many bytes", nodes: [("a", .file("12345")), ("b", .file("67890")), ("c", .file("!"))],
             limits: ExtractionLimits(maxTotalBytes: 10), refusal: "past the limit of 10 bytes", offender: "c"),
        Case(label: "a tree at the lowered limits publishes and installs",
             nodes: [("a", .file("12345")), ("b/" + String(repeating: "c", count: 16), .file("67890"))],
             limits: ExtractionLimits(maxTotalBytes: 10, maxEntries: 2, maxComponentBytes: 16)),
        Case(label: "a tree at the default limits publishes and installs",
             nodes: [("index.html", .file("x")), ("d/" + String(repeating: "c", count: 255), .file("c")),
                     (deep64, .file("deep")), (longName(1024), .file("long")), ("Index2.html", .file("i")), (nfd, .file("e"))]),
    ]

    @Test("publish refuses what the extractor refuses, naming the path and changing nothing", arguments: cases)
    func twin(_ c: Case) throws {
        let scratch = TemporaryDirectory("publish-rules")
        let source = scratch.file("src"), out = scratch.file("out")
        try PublishFixtures.publishSample(["1.0.0"], app: "app", to: out)
        try make(c.nodes, in: source)
        let before = try snapshot(out)

        do {
            _ = try Publisher.publish(PublishOptions(
                app: "app", version: Version("1.1.0")!, sourceDirectory: source, publishDirectory: out, limits: c.limits))
            #expect(c.refusal == nil, "published, expected a refusal containing '\(c.refusal ?? "")'")
        } catch let error as PublishError {
            let refusal = try #require(c.refusal, "refused: \(error)")
            #expect(error.code == .publish)
            #expect(error.cause == .publish, "\(error)")
            #expect(error.reason.contains(refusal), "\(error.reason)")
            #expect(error.path?.hasSuffix("/src/\(c.offender!)") == true, "path was \(error.path ?? "nil")")
            #expect(error.reason.contains("'\(PackageRules.quoted(c.offender!))'"), "\(error.reason)")
            #expect(try snapshot(out) == before, "the publish directory changed")
        }

        // The device side: the same names in a zip, extracted under the same limits.
        let zipPath = scratch.file("twin.zip"), installed = scratch.file("installed")
        if c.refusal == nil {
            // Installs what publish wrote, byte for byte.
            try ZipExtractor.extract(archive: URL(fileURLWithPath: "\(out)/app/1.1.0.zip"), to: URL(fileURLWithPath: installed), limits: c.limits)
            #expect(PublishFixtures.tree(installed) == PublishFixtures.tree(source))
            return
        }
        var zip = ZipBuilder()
        for (name, node) in c.nodes {
            switch node {
            case .file(let text): zip.file(name, Array(text.utf8))
            case .symlink(let target): zip.file(name, Array(target.utf8), mode: 0o120777)
            case .fifo: zip.file(name, [], mode: 0o010644)
            }
        }
        try zip.write(to: zipPath)
        do {
            try ZipExtractor.extract(archive: URL(fileURLWithPath: zipPath), to: URL(fileURLWithPath: installed), limits: c.limits)
            Issue.record("the extractor accepted what publish refuses")
        } catch let error as OfflineAgentError {
            #expect(error.code == .extract)
            #expect(error.cause == .hostileArchive, "\(error)")
            #expect(error.reason.contains(c.refusal!), "\(error.reason)")
        }
    }

    @Test("the CLI refuses a case-twin tree with a publish error naming the path")
    func cli() async throws {
        let scratch = TemporaryDirectory("publish-rules-cli")
        let source = scratch.file("src"), out = scratch.file("out")
        try make([("Index.html", .file("A")), ("index.html", .file("a"))], in: source)
        let result = try await CLI.run(["publish", "--app", "app", "--version", "1.0.0", "--source", source, "--out", out, "--unsigned", "--whitelist", "https://h5.example.com/app/"], executable: CLI.publisher)
        #expect(result.status == 1)
        #expect(result.stderr.contains("publish"), "\(result.stderr)")
        #expect(result.stderr.contains("only in case"), "\(result.stderr)")
        #expect(result.stderr.contains("/src/index.html"), "\(result.stderr)")
        #expect(!FileManager.default.fileExists(atPath: out), "a refused first publish creates nothing")
    }

    // MARK: Helpers

    private func make(_ nodes: [(String, Node)], in root: String) throws {
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        for (name, node) in nodes {
            let path = "\(root)/\(name)"
            let parent = (path as NSString).deletingLastPathComponent
            try FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true)
            switch node {
            case .file(let text):
                #expect(FileManager.default.createFile(atPath: path, contents: Data(text.utf8)), "create \(name.prefix(60))")
            case .symlink(let target):
                try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: target)
            case .fifo:
                #expect(mkfifo(path, 0o644) == 0, "mkfifo")
            }
        }
        // The file system must keep the spellings apart, or the row proves nothing.
        let listed = Set(try FileManager.default.subpathsOfDirectory(atPath: root).map { Array($0.utf8) })
        for (name, _) in nodes { #expect(listed.contains(Array(name.utf8)), "\(name.prefix(60)) not on disk as spelled") }
    }

    /// Every path under `root` (hidden too) with its type and, for files, bytes.
    private func snapshot(_ root: String) throws -> [String: Data?] {
        var entries: [String: Data?] = [:]
        for relative in try FileManager.default.subpathsOfDirectory(atPath: root) {
            let path = "\(root)/\(relative)"
            var isDirectory: ObjCBool = false
            _ = FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory)
            entries[relative] = isDirectory.boolValue ? nil : FileManager.default.contents(atPath: path) ?? Data()
        }
        return entries
    }
}
