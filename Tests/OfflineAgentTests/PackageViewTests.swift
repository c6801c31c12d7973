import Foundation
import Testing
@testable import OfflineAgent
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// The installed package read back through its skeleton and objects, as a patch reads its
/// old input: from two threads at once, across more objects than the view keeps open.
@Suite("Package view")
struct PackageViewTests {
    /// A plain stored zip of `count` distinct entries split into `objects`, and its view.
    static func view(entries count: Int, in temp: TemporaryDirectory) throws -> (zip: [UInt8], view: PackageView) {
        typealias P = SplitterPropertyTests
        let zip = P.build((0..<count).map { i in
            P.stored(Array("dir/file-\(i).js".utf8), (0..<(100 + i * 37)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ i) })
        })
        let objects = try ObjectStore(root: temp.path)
        let splitter = PatchedPackageSplitter(objects: objects, reserve: nil)
        #expect(zip.withUnsafeBytes { splitter.feed($0) } && splitter.endedCleanly)
        splitter.finish()
        let skeleton = temp.file("package.skel")
        try PackageSkeleton.write(size: splitter.size, segments: splitter.segments.map { ($0.start, $0.length, $0.object?.name) },
                                  skeletonBytes: splitter.skeletonBytes, to: skeleton)
        return (zip, try #require(PackageView(skeletonPath: skeleton, objectsDirectory: objects.directory)))
    }

    /// The process's descriptors open on files under `directory` (other tests run beside this one).
    static func openDescriptors(under directory: String) -> Int {
        let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return fds.filter { ((try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\($0)")) ?? "").hasPrefix(directory + "/") }.count
    }

    @Test("reads in any order, from two threads at once, give the package's bytes; the objects kept open stay few")
    func readsAcrossManyObjects() async throws {
        let temp = TemporaryDirectory("view")
        let (zip, view) = try Self.view(entries: 60, in: temp)
        #expect(view.size == Int64(zip.count))
        let directory = try ObjectStore(root: temp.path).directory
        // Each reader walks the package in its own order of pieces, wrapping around the end.
        let readers = [(start: 0, step: 4_099), (start: zip.count / 2, step: 7_919)].map { reader in
            Task { try await LocalHTTP.onThread {
                var mismatches = 0
                var buffer = [UInt8](repeating: 0, count: 8_192)
                var offset = reader.start
                for round in 0..<400 {
                    let count = (round * 613) % 3_000 + 1
                    let n = buffer.withUnsafeMutableBytes { view.read(into: $0.baseAddress!, count: count, at: Int64(offset)) }
                    let expected = zip[offset..<min(zip.count, offset + count)]
                    if n != expected.count || buffer[0..<max(0, n)] != expected[...] { mismatches += 1 }
                    offset = (offset + reader.step) % zip.count
                }
                return (mismatches, PackageViewTests.openDescriptors(under: directory))
            } }
        }
        for reader in readers {
            let (mismatches, open) = try await reader.value
            #expect(mismatches == 0)
            #expect(open <= 8, "objects kept open while reading: \(open)")
        }
        #expect(try view.sha256() == PackageFixture.sha256(zip))
    }

    @Test("objects removed under the view: a read is refused (-1), never filled with other bytes")
    func removedObject() throws {
        let temp = TemporaryDirectory("view-removed")
        let (zip, view) = try Self.view(entries: 20, in: temp)
        let objects = try ObjectStore(root: temp.path)
        for name in try FileManager.default.contentsOfDirectory(atPath: objects.directory) {
            try FileManager.default.removeItem(atPath: "\(objects.directory)/\(name)")
        }
        var buffer = [UInt8](repeating: 0, count: zip.count)
        let n = buffer.withUnsafeMutableBytes { view.read(into: $0.baseAddress!, count: zip.count, at: 0) }
        #expect(n == -1)
    }
}
