import Foundation
import Testing
@testable import OfflineAgent
import TestSupport

/// A download a stopped run kept whole (every byte arrived; the body's end, the rename or
/// the install did not): the next run never asks for it again from byte 0 while the
/// server honours ranges. With a hash to check, it makes no request for it at all;
/// without one, it asks for the last byte under `If-Range`, which a changed file answers whole.
@Suite("Kept whole downloads")
struct KeptDownloadTests {
    /// What a stopped run left of the offered file, and what the next run must ask for.
    struct Case: CustomTestStringConvertible, Sendable {
        var label: String
        /// Offers 1.1.0 and returns the path of the file it downloads and the bytes served there.
        var offer: @Sendable (SyncHarness) throws -> (file: String, bytes: [UInt8], key: String)
        /// Where the kept bytes are: `<key>.part` (the body's end never came) or `<key>` (renamed, not yet used).
        var renamed = false
        /// The kept bytes differ from what the server has now (another file at the same URL).
        var changed = false
        /// The kept bytes were recorded as coming from another URL (the manifest moved the file).
        var moved = false
        /// The `.part.json` record is empty: it is written unflushed, and a power cut may leave it so.
        var emptyRecord = false
        /// The `Range` header each request for the file must carry (nil: none); empty: no request.
        var ranges: @Sendable (Int) -> [String?]
        var testDescription: String { label }
    }

    /// The full package of 1.1.0, hashed by the manifest.
    static func hashedFull(_ h: SyncHarness) throws -> (file: String, bytes: [UInt8], key: String) {
        h.origin.setManifest(h.full("1.1.0"))
        let bytes = h.fixture.bytes("1.1.0")
        return ("/files/1.1.0.zip", bytes, PackageFixture.sha256(bytes))
    }

    /// A patch that is missing, and a gzip full fallback without `fullSha256`: kept under a
    /// name from its URL, checked only after decoding.
    static func unhashedGzip(_ h: SyncHarness) throws -> (file: String, bytes: [UInt8], key: String) {
        let gz = try PackageFixture.gzip(h.fixture.bytes("1.1.0"))
        h.origin.put("1.1.0.zip.gz", gz)
        var manifest = try h.patch(from: "1.0.0", to: "1.1.0", ["compression": "gzip", "fullUrl": "files/1.1.0.zip.gz", "fullSize": gz.count])
        manifest.removeValue(forKey: "fullSha256")
        manifest["url"] = "files/missing.bsdiff"
        h.origin.setManifest(manifest)
        let url = URL(string: h.origin.fileURL("1.1.0.zip.gz"))!
        return ("/files/1.1.0.zip.gz", gz, DownloadTarget(url: url, size: 0, sha256: nil).key)
    }

    static let cases: [Case] = [
        Case(label: "hashed, every byte in the .part: installed without a request", offer: hashedFull, ranges: { _ in [] }),
        Case(label: "hashed, every byte but the wrong ones: fetched whole once", offer: hashedFull, changed: true,
             ranges: { _ in [nil] }),
        Case(label: "hashed, every byte, from the URL the file had before: installed without a request", offer: hashedFull,
             moved: true, ranges: { _ in [] }),
        Case(label: "unhashed, every byte, from the URL the file had before: fetched whole once", offer: unhashedGzip,
             moved: true, ranges: { _ in [nil] }),
        Case(label: "unhashed, every byte, its record emptied by a power cut: fetched whole once", offer: unhashedGzip,
             emptyRecord: true, ranges: { _ in [nil] }),
        Case(label: "unhashed, every byte in the .part: only the last byte is asked for", offer: unhashedGzip,
             ranges: { size in ["bytes=\(size - 1)-"] }),
        Case(label: "unhashed, renamed but not decoded yet: only the last byte is asked for", offer: unhashedGzip, renamed: true,
             ranges: { size in ["bytes=\(size - 1)-"] }),
        Case(label: "unhashed, the server's file changed: If-Range gets it whole", offer: unhashedGzip, changed: true,
             ranges: { size in ["bytes=\(size - 1)-"] }),
    ]

    @Test("a kept whole download is reused, never fetched again from byte 0", arguments: cases)
    func keptWhole(_ c: Case) async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        let (file, bytes, key) = try c.offer(h)
        let dir = h.store.downloadsDirectory("mall")
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let kept = "\(dir)/\(key)" + (c.renamed ? "" : ".part")
        var planted = bytes
        // The same length, other bytes: what a run kept of a file since replaced at that URL.
        if c.changed { planted[planted.count / 2] ^= 0xFF }
        try Data(planted).write(to: URL(fileURLWithPath: kept))
        // The validator the downloader recorded from the answer it streamed.
        let tag = "\"\(PackageFixture.sha256(planted).prefix(16))\""
        let info = ["url": h.origin.fileURL(c.moved ? "old/location" : String(file.dropFirst("/files/".count))), "validator": tag]
        try (c.emptyRecord ? Data() : JSONEncoder().encode(info)).write(to: URL(fileURLWithPath: "\(dir)/\(key).part.json"))

        let report = await h.sync()
        #expect(report.result == .updated, "\(report.error?.description ?? "")")
        #expect(h.activeMatches("1.1.0"))
        let requests = h.origin.requests(for: file)
        #expect(requests.map { $0.header("Range") } == c.ranges(bytes.count), "\(requests.map(\.headers))")
        if let first = requests.first, first.header("Range") != nil {
            #expect(first.header("If-Range") == tag)
        }
        let expected = requests.isEmpty ? 0 : c.changed || requests.first?.header("Range") == nil ? bytes.count : 1
        #expect(report.bytesDownloaded == Int64(expected), "\(report.bytesDownloaded)")
    }
}
