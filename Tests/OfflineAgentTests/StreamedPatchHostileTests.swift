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
        h.origin.setManifest(try StreamedPatchTests.patchTo(h, "twoends", zip))
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
}
