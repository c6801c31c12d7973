import Foundation
import Testing
@testable import OfflineAgent
import TestSupport

/// Any tree the agent made can be removed, at any depth, without following links out
/// of it; garbage collection deletes a version's record only after its tree.
@Suite("Tree removal", .serialized)
struct TreeRemovalTests {
    struct Shape: CustomTestStringConvertible, Sendable {
        var label: String
        /// Builds the tree at the given path (inside a scratch directory).
        var build: @Sendable (_ path: String, _ outside: String) throws -> Void
        var testDescription: String { label }
    }

    static let shapes: [Shape] = [
        Shape(label: "1500 levels (beyond PATH_MAX)") { path, _ in
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
            try DeepTree.make(under: path, components: Array(repeating: "lvl", count: 1500))
        },
        Shape(label: "wide: 600 files in 20 directories") { path, _ in
            for d in 0..<20 {
                try FileManager.default.createDirectory(atPath: "\(path)/d\(d)/sub", withIntermediateDirectories: true)
                for f in 0..<30 { try Data("\(f)".utf8).write(to: URL(fileURLWithPath: "\(path)/d\(d)/sub/f\(f)")) }
            }
        },
        Shape(label: "links out of the tree are removed, not followed") { path, outside in
            try FileManager.default.createDirectory(atPath: "\(path)/a", withIntermediateDirectories: true)
            try FileManager.default.createSymbolicLink(atPath: "\(path)/a/to-dir", withDestinationPath: outside)
            try FileManager.default.createSymbolicLink(atPath: "\(path)/a/to-file", withDestinationPath: "\(outside)/keep.txt")
            try FileManager.default.createSymbolicLink(atPath: "\(path)/dangling", withDestinationPath: "/nonexistent/x")
        },
        Shape(label: "fifo, empty directories, dot names") { path, _ in
            try FileManager.default.createDirectory(atPath: "\(path)/e/f/g", withIntermediateDirectories: true)
            #expect(mkfifo("\(path)/e/pipe", 0o644) == 0)
            try Data().write(to: URL(fileURLWithPath: "\(path)/e/.hidden"))
            try FileManager.default.createDirectory(atPath: "\(path)/..dots", withIntermediateDirectories: true)
        },
        Shape(label: "read-only directories") { path, _ in
            try FileManager.default.createDirectory(atPath: "\(path)/ro/inner", withIntermediateDirectories: true)
            try Data("x".utf8).write(to: URL(fileURLWithPath: "\(path)/ro/inner/file"))
            chmod("\(path)/ro/inner", 0o555)
            chmod("\(path)/ro", 0o555)
        },
        Shape(label: "a plain file") { path, _ in
            try Data("file".utf8).write(to: URL(fileURLWithPath: path))
        },
        Shape(label: "nothing there") { _, _ in },
    ]

    @Test("removeTree removes every shape and nothing outside it", arguments: shapes)
    func removes(_ shape: Shape) throws {
        let scratch = TemporaryDirectory("rm")
        let outside = scratch.file("outside")
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: false)
        try Data("keep".utf8).write(to: URL(fileURLWithPath: "\(outside)/keep.txt"))
        let target = scratch.file("tree")
        try shape.build(target, outside)
        try FileSystem.removeTree(target)
        #expect(!FileSystem.exists(target))
        #expect(tree(scratch.path) == ["outside", "outside/keep.txt"])
        #expect(FileManager.default.contents(atPath: "\(outside)/keep.txt") == Data("keep".utf8))
    }

    /// Installs 1.0.0 and 1.1.0, plants a tree deeper than PATH_MAX in 1.0.0, then
    /// installs 1.2.0, whose garbage collection drops 1.0.0.
    @Test("garbage collection removes a version deeper than PATH_MAX, and its record")
    func collectsDeepVersion() async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        try await h.install("1.1.0")
        let old = h.store.versionDirectory("mall", Version("1.0.0")!)
        try DeepTree.make(under: old, components: Array(repeating: "deeper", count: 1000))
        try await h.install("1.2.0")
        #expect(!FileSystem.exists(old), "the deep version is gone")
        #expect(!FileSystem.exists(h.store.metadataPath("mall", Version("1.0.0")!)))
        #expect(!FileSystem.exists(h.store.packagePath("mall", Version("1.0.0")!)))
        #expect(h.activeMatches("1.2.0"))
        #expect(FileSystem.exists(h.store.metadataPath("mall", Version("1.1.0")!)), "the previous version stays")
    }

    @Test("a version whose tree cannot be removed keeps its record; the next collection finishes")
    func recordOutlivesTree() async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        try await h.install("1.1.0")
        let v1 = Version("1.0.0")!
        let old = h.store.versionDirectory("mall", v1)
        // A mount point cannot be removed (EBUSY), even by root.
        let pinned = "\(old)/pinned"
        try FileManager.default.createDirectory(atPath: pinned, withIntermediateDirectories: false)
        guard (try? await run("mount", ["-t", "tmpfs", "-o", "size=1m", "tmpfs", pinned]))?.status == 0 else {
            Issue.record("cannot mount a tmpfs here (needs root/CAP_SYS_ADMIN)")
            return
        }
        defer { _ = try? runOnThisThread("umount", ["-l", pinned]) }  // blocking: a lazy unmount, a moment
        h.store.collectGarbage("mall", keep: [Version("1.1.0")!])
        #expect(FileSystem.exists(pinned), "the pinned tree could not go")
        #expect(h.store.metadata("mall", v1) != nil, "so its record stays")
        #expect(try await run("umount", [pinned]).status == 0)
        h.store.collectGarbage("mall", keep: [Version("1.1.0")!])
        #expect(!FileSystem.exists(old))
        #expect(h.store.metadata("mall", v1) == nil)
        #expect(h.activeMatches("1.1.0"))
    }

    @Test("a staging directory deeper than PATH_MAX left by a crash is removed by the next sync")
    func deepLeftoverRemoved() async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        let leftover = "\(h.store.versionsDirectory("mall"))/.1.1.0.extract-AbC123"
        try FileManager.default.createDirectory(atPath: leftover, withIntermediateDirectories: false)
        try DeepTree.make(under: leftover, components: Array(repeating: "staging", count: 1000))
        h.origin.setManifest(h.full("1.1.0"))
        let report = await h.sync()
        #expect(report.result == .updated, "\(report.error?.description ?? "")")
        let names = try FileManager.default.contentsOfDirectory(atPath: h.store.versionsDirectory("mall"))
        #expect(names.filter { $0.hasPrefix(".") }.isEmpty, "\(names)")
        #expect(h.activeMatches("1.1.0"))
    }
}
