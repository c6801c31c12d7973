import Foundation
import Testing
@testable import OfflineAgent
@testable import OfflinePublish
import TestSupport

/// A new operator's two classic mistakes, through the real `offline-publish`: a
/// `--source` that is not a site's root (a wheel's root: `*.dist-info/` beside the
/// app's directory), and an `--out` that is an app's directory instead of the publish
/// directory above it. Each is refused naming the mistake, with nothing written.
@Suite("Publish mistakes")
struct PublishMistakeTests {
    typealias F = PublishFixtures

    /// A wheel's root: the site one level down, metadata beside it.
    static func wheelRoot(in scratch: String) throws -> String {
        let root = "\(scratch)/wheel"
        for (path, body) in [("netron-7.0.dist-info/METADATA", "Name: netron"), ("netron/index.html", "<p>netron</p>"), ("netron/app.js", "1")] {
            try FileManager.default.createDirectory(atPath: FileSystem.parent(of: "\(root)/\(path)"), withIntermediateDirectories: true)
            try Data(body.utf8).write(to: URL(fileURLWithPath: "\(root)/\(path)"))
        }
        return root
    }

    @Test("a source with no index.html (or --fallback file) at its root is refused unless --no-entry-page says so")
    func noEntryPage() async throws {
        let publisher = try #require(F.builtExecutable("offline-publish"), "offline-publish is not built")
        let scratch = try F.temporaryDirectory("mistakes")
        defer { F.cleanUp(scratch) }
        let source = try Self.wheelRoot(in: scratch)
        func publish(_ out: String, _ extra: [String] = []) async throws -> (status: Int32, stdout: String, stderr: String) {
            try await F.run(publisher, ["publish", "--app", "netron", "--version", "1.0.0", "--source", source, "--out", out, "--unsigned",
                                  "--whitelist", "https://h5.example.com/netron/"] + extra)
        }

        let refused = try await publish("\(scratch)/refused")
        #expect(refused.status == 64, "\(refused)")
        #expect(refused.stderr.contains("no index.html at its root"), "\(refused.stderr)")
        #expect(refused.stderr.contains("netron-7.0.dist-info/") && refused.stderr.contains("netron/"), "names what it holds: \(refused.stderr)")
        #expect(refused.stderr.contains("--no-entry-page") && refused.stderr.contains("--fallback"), "\(refused.stderr)")
        #expect(!FileManager.default.fileExists(atPath: "\(scratch)/refused"), "nothing written")

        // The entry page named by --fallback is one, wherever it is.
        let fallback = try await publish("\(scratch)/fallback", ["--fallback", "netron/index.html"])
        #expect(fallback.status == 0, "\(fallback.stderr)")
        // Said explicitly, files without a page publish.
        let explicit = try await publish("\(scratch)/explicit", ["--no-entry-page"])
        #expect(explicit.status == 0, "\(explicit.stderr)")
        #expect(try PublishState.load(appDirectory: "\(scratch)/explicit/netron")?.latest == Version("1.0.0"))
    }

    @Test("--out naming an app's directory is refused naming the publish directory above it, for publish and every verb")
    func outIsAppDirectory() async throws {
        let publisher = try #require(F.builtExecutable("offline-publish"), "offline-publish is not built")
        let out = try F.temporaryDirectory("mistakes")
        defer { F.cleanUp(out) }
        try F.publishSample(["1.0.0"], to: out)
        let before = F.tree(out)
        let app = "\(out)/sample"
        for arguments in [
            ["publish", "--app", "sample", "--version", "1.1.0", "--source", F.sampleApp("1.1.0"), "--out", app, "--unsigned"],
            ["stage", "--app", "sample", "--out", app, "--percent", "0"],
            ["set", "--app", "sample", "--out", app, "--rollout", "5"],
        ] {
            let result = try await F.run(publisher, arguments)
            #expect(result.status == 64, "\(arguments): \(result)")
            #expect(result.stderr.contains("is the directory of app 'sample'") && result.stderr.contains("--out \(out)"),
                    "\(arguments): \(result.stderr)")
        }
        #expect(F.tree(out) == before, "nothing written, no nested publish directory")
    }
}
