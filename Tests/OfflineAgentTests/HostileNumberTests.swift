import Foundation
import Testing
@testable import OfflineAgent
import TestSupport

/// Untrusted numbers (manifest fields, HTTP headers, zip records, gzip trailers,
/// patch headers) never end the process: each is refused with its cause code, before
/// any file is requested when the manifest already says enough, and the installed
/// version stays whole.
@Suite("Hostile numbers")
struct HostileNumberTests {
    static let maxInt64 = "9223372036854775807"
    static let pastInt64 = "9223372036854775808"
    static let sizeRule = "size must be an integer 0…9223372036854775807"

    /// A manifest object encoded with some fields replaced by raw JSON text, so numbers
    /// no `JSONSerialization` would write (`1e400`, `9223372036854775808`) reach the agent as is.
    static func body(_ object: [String: Any], raw: [String: String]) -> [UInt8] {
        var object = object
        for key in raw.keys { object[key] = "@@\(key)@@" }
        var text = String(decoding: try! JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]), as: UTF8.self)
        for (key, value) in raw { text = text.replacingOccurrences(of: "\"@@\(key)@@\"", with: value) }
        return Array(text.utf8)
    }

    static func fileRequests(_ h: SyncHarness) -> Int { h.origin.requests.filter { $0.path.hasPrefix("/files/") }.count }

    /// A gzip full-package manifest for 1.1.0 (the `.zip.gz` put on the origin).
    static func gzipFull(_ h: SyncHarness, _ gz: [UInt8]) -> [String: Any] {
        h.origin.put("1.1.0.zip.gz", gz)
        return h.full("1.1.0", ["url": "files/1.1.0.zip.gz", "size": gz.count, "sha256": PackageFixture.sha256(gz), "compression": "gzip"])
    }

    // MARK: - Manifest numbers

    struct ManifestCase: CustomTestStringConvertible, Sendable {
        var label: String
        var cause: OfflineAgentError.Cause
        var code: OfflineAgentError.Code
        /// A fragment of the reason (the whole rule for manifest-invalid).
        var reason: String
        /// The manifest body and the cap for the hostile sync (nil: the default 1 GiB).
        var make: @Sendable (SyncHarness) throws -> (body: [UInt8], cap: Int64?)
        var testDescription: String { label }
    }

    static let manifestCases: [ManifestCase] = [
        ManifestCase(label: "size = Int64.max", cause: .tooLarge, code: .download, reason: "exceeds the cap") { h in
            (body(h.full("1.1.0"), raw: ["size": maxInt64]), nil)
        },
        ManifestCase(label: "size = Int64.max + 1", cause: .manifestInvalid, code: .manifest, reason: sizeRule) { h in
            (body(h.full("1.1.0"), raw: ["size": pastInt64]), nil)
        },
        ManifestCase(label: "size = 20 digits", cause: .manifestInvalid, code: .manifest, reason: sizeRule) { h in
            (body(h.full("1.1.0"), raw: ["size": "99999999999999999999"]), nil)
        },
        ManifestCase(label: "negative size", cause: .manifestInvalid, code: .manifest, reason: sizeRule) { h in
            (body(h.full("1.1.0"), raw: ["size": "-1"]), nil)
        },
        ManifestCase(label: "fractional size", cause: .manifestInvalid, code: .manifest, reason: sizeRule) { h in
            (body(h.full("1.1.0"), raw: ["size": "1.5"]), nil)
        },
        ManifestCase(label: "the true size written with a fraction", cause: .manifestInvalid, code: .manifest, reason: sizeRule) { h in
            (body(h.full("1.1.0"), raw: ["size": "\(h.fixture.bytes("1.1.0").count).0"]), nil)
        },
        ManifestCase(label: "size with a huge exponent", cause: .manifestInvalid, code: .manifest, reason: sizeRule) { h in
            (body(h.full("1.1.0"), raw: ["size": "1e400"]), nil)
        },
        ManifestCase(label: "the true size written with an exponent", cause: .manifestInvalid, code: .manifest, reason: sizeRule) { h in
            (body(h.full("1.1.0"), raw: ["size": "\(h.fixture.bytes("1.1.0").count)e0"]), nil)
        },
        ManifestCase(label: "fullSize = Int64.max on a patch", cause: .tooLarge, code: .download, reason: "fullSize of \(maxInt64) bytes exceeds the cap") { h in
            (body(try h.patch(from: "1.0.0", to: "1.1.0"), raw: ["fullSize": maxInt64]), nil)
        },
        ManifestCase(label: "fullSize = Int64.max + 1", cause: .manifestInvalid, code: .manifest, reason: "fullSize must be an integer 0…9223372036854775807") { h in
            (body(try h.patch(from: "1.0.0", to: "1.1.0"), raw: ["fullSize": pastInt64]), nil)
        },
        ManifestCase(label: "only fullSize above the cap: the patch is not fetched", cause: .tooLarge, code: .download, reason: "fullSize of") { h in
            let manifest = try h.patch(from: "1.0.0", to: "1.1.0")
            let fullSize = try #require(manifest["fullSize"] as? Int)
            #expect(try #require(manifest["size"] as? Int) < fullSize - 1)
            return (body(manifest, raw: [:]), Int64(fullSize - 1))
        },
        ManifestCase(label: "gzip size = Int64.max", cause: .tooLarge, code: .download, reason: "size of \(maxInt64) bytes exceeds the cap") { h in
            (body(gzipFull(h, try PackageFixture.gzip(h.fixture.bytes("1.1.0"))), raw: ["size": maxInt64]), nil)
        },
        ManifestCase(label: "gzip size = Int64.max / 4 + 1 under an unbounded cap (its estimate overflows)", cause: .tooLarge, code: .download, reason: "overflows") { h in
            (body(gzipFull(h, try PackageFixture.gzip(h.fixture.bytes("1.1.0"))), raw: ["size": "\(Int64.max / 4 + 1)"]), Int64.max)
        },
        ManifestCase(label: "gzip size above the cap", cause: .tooLarge, code: .download, reason: "exceeds the cap") { h in
            let gz = try PackageFixture.gzip(h.fixture.bytes("1.1.0"))
            return (body(gzipFull(h, gz), raw: [:]), Int64(gz.count - 1))
        },
        ManifestCase(label: "rollout 1e2", cause: .manifestInvalid, code: .manifest, reason: "rollout must be an integer 0…100") { h in
            (body(h.full("1.1.0"), raw: ["rollout": "1e2"]), nil)
        },
        ManifestCase(label: "rollout 100.0", cause: .manifestInvalid, code: .manifest, reason: "rollout must be an integer 0…100") { h in
            (body(h.full("1.1.0"), raw: ["rollout": "100.0"]), nil)
        },
        ManifestCase(label: "rollout past Int64", cause: .manifestInvalid, code: .manifest, reason: "rollout must be an integer 0…100") { h in
            (body(h.full("1.1.0"), raw: ["rollout": pastInt64]), nil)
        },
        ManifestCase(label: "negative rollout", cause: .manifestInvalid, code: .manifest, reason: "rollout must be an integer 0…100") { h in
            (body(h.full("1.1.0"), raw: ["rollout": "-1"]), nil)
        },
        ManifestCase(label: "version component of 10 digits", cause: .manifestInvalid, code: .manifest,
                     reason: "version must be dotted decimal numbers (1 to 8 components, each 0…999999999)") { h in
            (body(h.full("1.1.0", ["version": "1.1.9999999999"]), raw: [:]), nil)
        },
    ]

    @Test("a hostile manifest number is refused with its cause before any file request", arguments: manifestCases)
    func manifestNumber(_ testCase: ManifestCase) async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        let (manifest, cap) = try testCase.make(h)
        if let cap { h.configuration.maxPackageBytes = cap }
        h.origin.setManifest(raw: manifest)
        let before = Self.fileRequests(h)
        let report = await h.sync()
        #expect(report.result == .failed)
        let error = try #require(report.error)
        #expect(error.cause == testCase.cause, "\(error)")
        #expect(error.code == testCase.code, "\(error)")
        if testCase.cause == .manifestInvalid {
            #expect(error.reason == testCase.reason)
        } else {
            #expect(error.reason.contains(testCase.reason), "\(error)")
        }
        #expect(Self.fileRequests(h) == before, "no file is requested")
        #expect(h.activeMatches("1.0.0"))
    }

    // MARK: - The real CLI

    /// Manifests that killed `offline-agent sync` with SIGILL (an overflow in the disk budget).
    static let cliManifests: [String] = ["size", "fullSize", "gzip size"]

    @Test("sync --json on a size of Int64.max exits 1 with one JSON object, never a signal", arguments: cliManifests)
    func cliAbsurdSize(_ field: String) async throws {
        let h = try SyncHarness()
        let manifest: [UInt8] = switch field {
        case "size": Self.body(h.full("1.0.0"), raw: ["size": Self.maxInt64])
        case "fullSize": Self.body(try h.patch(from: "1.0.0", to: "1.1.0"), raw: ["fullSize": Self.maxInt64])
        default: Self.body(Self.gzipFull(h, try PackageFixture.gzip(h.fixture.bytes("1.1.0"))), raw: ["size": Self.maxInt64])
        }
        if field == "fullSize" {
            // A patch needs its base installed, or the agent goes straight to the full package.
            try await h.install("1.0.0")
        }
        h.origin.setManifest(raw: manifest)
        let before = Self.fileRequests(h)
        let result = try await CLI.run(["sync", "--allow-unsigned", "--root", h.root.path, "--app", "mall", "--manifest", h.origin.manifestURL.absoluteString, "--force", "--json"])
        #expect(!result.signaled, "\(result.stderr)")
        #expect(result.status == 1, "\(result.stderr)")
        let lines = result.stdout.split(separator: "\n")
        #expect(lines.count == 1, "\(result.stdout)")
        let json = try #require(CLI.json(result.stdout))
        #expect(json["result"] as? String == "failed")
        #expect(json["errorCode"] as? String == "too-large")
        #expect(json["phase"] as? String == "download")
        #expect((json["error"] as? String)?.contains("exceeds the cap") == true, "\(json)")
        #expect(Self.fileRequests(h) == before)
        #expect(field == "fullSize" ? h.activeMatches("1.0.0") : h.store.active("mall") == nil)
    }

    // MARK: - HTTP headers

    struct HeaderCase: CustomTestStringConvertible, Sendable {
        var label: String
        /// Leave half of the file as a resumable part first, so the agent sends `Range`.
        var resume: Bool
        var cause: OfflineAgentError.Cause
        var reason: String
        var reply: @Sendable (ScriptedServer.Request, [UInt8]) -> ScriptedServer.Reply
        var testDescription: String { label }
    }

    /// The true tail of `bytes` from the request's range start, with a hostile `Content-Range`.
    static func tail(_ request: ScriptedServer.Request, _ bytes: [UInt8], contentRange: (Int) -> String) -> ScriptedServer.Reply {
        let start = Int(request.header("Range")?.dropFirst(6).split(separator: "-").first ?? "0") ?? 0
        return ScriptedServer.Reply(status: 206, headers: [("Content-Range", contentRange(start))], body: Array(bytes[start...]))
    }

    static let headerCases: [HeaderCase] = [
        HeaderCase(label: "Content-Length = Int64.max", resume: false, cause: .protocolViolation, reason: "announces \(maxInt64) bytes") { _, bytes in
            ScriptedServer.Reply(status: 200, headers: [("Content-Length", maxInt64)], body: bytes, ending: .close(afterBodyBytes: bytes.count))
        },
        HeaderCase(label: "Content-Range end = Int64.max, total unknown", resume: true, cause: .protocolViolation, reason: "") { request, bytes in
            tail(request, bytes) { "bytes \($0)-\(maxInt64)/*" }
        },
        HeaderCase(label: "Content-Range total = Int64.max", resume: true, cause: .protocolViolation, reason: "") { request, bytes in
            tail(request, bytes) { "bytes \($0)-\(bytes.count - 1)/\(maxInt64)" }
        },
        HeaderCase(label: "Content-Range total past Int64", resume: true, cause: .protocolViolation, reason: "") { request, bytes in
            tail(request, bytes) { "bytes \($0)-\(bytes.count - 1)/\(pastInt64)" }
        },
        HeaderCase(label: "Content-Range start = Int64.max", resume: true, cause: .protocolViolation, reason: "") { request, bytes in
            tail(request, bytes) { _ in "bytes \(maxInt64)-\(maxInt64)/\(bytes.count)" }
        },
        HeaderCase(label: "206 with a Content-Length beyond the range", resume: true, cause: .protocolViolation, reason: "announces") { request, bytes in
            var reply = tail(request, bytes) { "bytes \($0)-\(bytes.count - 1)/\(bytes.count)" }
            reply.headers.append(("Content-Length", "\(Int64.max)"))
            reply.ending = .close(afterBodyBytes: reply.body.count)
            return reply
        },
    ]

    @Test("absurd Content-Length and Content-Range are refused as protocol violations; the next sync heals", arguments: headerCases)
    func headerNumber(_ testCase: HeaderCase) async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        h.origin.setManifest(h.full("1.1.0"))
        if testCase.resume {
            h.origin.override("1.1.0.zip") { _, bytes in
                ScriptedServer.Reply(status: 200, headers: [("ETag", "\"v1\"")], body: bytes, ending: .close(afterBodyBytes: bytes.count / 2))
            }
            #expect(await h.sync().result == .failed)
        }
        h.origin.override("1.1.0.zip", testCase.reply)
        let report = await h.sync()
        #expect(report.result == .failed)
        let error = try #require(report.error)
        #expect(error.code == .download, "\(error)")
        #expect(error.cause == testCase.cause, "\(error)")
        if !testCase.reason.isEmpty { #expect(error.reason.contains(testCase.reason), "\(error)") }
        if testCase.resume {
            #expect(h.origin.requests(for: "/files/1.1.0.zip").contains { $0.header("Range") != nil }, "the agent did resume")
        }
        #expect(h.activeMatches("1.0.0"))
        h.origin.clearOverrides()
        let healed = await h.sync()
        #expect(healed.result == .updated, "\(healed.error?.description ?? "")")
        #expect(h.activeMatches("1.1.0"))
    }

    @Test("a Retry-After date with an absurd year is no date: the check fails cleanly",
          arguments: ["Sun, 06 Nov 99999999999 08:49:37 GMT", "Sun, 06 Nov \(maxInt64) 08:49:37 GMT"])
    func retryAfterYear(_ value: String) async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        h.origin.setManifestReply { _ in .status(429, headers: [("Retry-After", value)]) }
        let report = await h.sync()
        #expect(report.result == .failed)
        #expect(report.error?.code == .manifest, "\(report.error?.description ?? "")")
        #expect(report.error?.cause == .manifestUnavailable, "\(report.error?.description ?? "")")
        #expect(report.error?.reason.contains("without a usable Retry-After") == true, "\(report.error?.description ?? "")")
        #expect(h.activeMatches("1.0.0"))
    }

    // MARK: - Zip records

    /// A valid stored zip whose end record claims zip64 and whose zip64 locator points at `recordOffset`.
    static func zip64Locator(at recordOffset: UInt64, in zip: [UInt8]) -> [UInt8] {
        precondition(zip.count >= 22 && Array(zip[(zip.count - 22)..<(zip.count - 18)]) == [0x50, 0x4b, 0x05, 0x06])
        var end = Array(zip.suffix(22))
        end[10] = 0xFF; end[11] = 0xFF  // total entries: see the zip64 record
        func le(_ value: UInt64, _ bytes: Int) -> [UInt8] { (0..<bytes).map { UInt8(truncatingIfNeeded: value >> (8 * UInt64($0))) } }
        let locator = le(0x0706_4b50, 4) + le(0, 4) + le(recordOffset, 8) + le(1, 4)
        return Array(zip.dropLast(22)) + locator + end
    }

    static let locatorOffsets: [UInt64] = [.max, 1 << 63, UInt64(Int64.max)]

    @Test("a zip64 locator pointing past any file is a corrupt archive, not a crash", arguments: locatorOffsets)
    func zip64LocatorOffset(_ offset: UInt64) throws {
        let scratch = TemporaryDirectory("zip64")
        var builder = ZipBuilder()
        builder.file("index.html", "<p>hi</p>")
        let path = scratch.file("hostile.zip")
        try Data(Self.zip64Locator(at: offset, in: builder.build())).write(to: URL(fileURLWithPath: path))
        let error = try #require(throws: OfflineAgentError.self) {
            try ZipExtractor.extract(archive: URL(fileURLWithPath: path), to: URL(fileURLWithPath: scratch.file("out")))
        }
        #expect(error.code == .extract)
        #expect(error.cause == .archiveCorrupt, "\(error)")
        #expect(error.reason == "zip64 end record lies outside the file", "\(error)")
        #expect(!FileManager.default.fileExists(atPath: scratch.file("out")))
    }

    @Test("a package with an absurd zip64 locator fails the sync and keeps the installed version")
    func zip64LocatorThroughSync() async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        let hostile = Self.zip64Locator(at: .max, in: h.fixture.bytes("1.1.0"))
        h.origin.put("1.1.0.zip", hostile)
        let sha = PackageFixture.sha256(hostile)
        h.origin.setManifest(h.full("1.1.0", ["size": hostile.count, "sha256": sha, "packageSha256": sha]))
        let report = await h.sync()
        #expect(report.result == .failed)
        #expect(report.error?.code == .extract, "\(report.error?.description ?? "")")
        #expect(report.error?.cause == .archiveCorrupt, "\(report.error?.description ?? "")")
        #expect(h.activeMatches("1.0.0"))
    }

    // MARK: - Gzip

    struct GzipCase: CustomTestStringConvertible, Sendable {
        var label: String
        var cause: OfflineAgentError.Cause
        var reason: String
        /// Turns the true `.zip.gz` into the hostile one; may set a cap (nil: default).
        var mangle: @Sendable ([UInt8]) -> (gz: [UInt8], cap: Int64?)
        var testDescription: String { label }
    }

    static let gzipCases: [GzipCase] = [
        GzipCase(label: "decompresses past the cap", cause: .tooLarge, reason: "decompressed package exceeds") { gz in (gz, Int64(gz.count)) },
        GzipCase(label: "ISIZE trailer = 0xFFFFFFFF", cause: .archiveCorrupt, reason: "corrupt gzip data") { gz in
            (Array(gz.dropLast(4)) + [0xFF, 0xFF, 0xFF, 0xFF], nil)
        },
        GzipCase(label: "CRC trailer wrong", cause: .archiveCorrupt, reason: "corrupt gzip data") { gz in
            var copy = gz
            copy[copy.count - 8] ^= 0xFF
            return (copy, nil)
        },
        GzipCase(label: "trailer cut off", cause: .archiveCorrupt, reason: "truncated") { gz in (Array(gz.dropLast(8)), nil) },
        GzipCase(label: "bytes after the trailer", cause: .archiveCorrupt, reason: "unexpected data") { gz in (gz + [0x1f, 0x8b, 0, 0], nil) },
    ]

    @Test("a hostile gzip package is refused with its cause and keeps the installed version", arguments: gzipCases)
    func gzipNumbers(_ testCase: GzipCase) async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        let (gz, cap) = testCase.mangle(try PackageFixture.gzip(h.fixture.bytes("1.1.0")))
        if let cap { h.configuration.maxPackageBytes = cap }
        h.origin.setManifest(Self.gzipFull(h, gz))
        let report = await h.sync()
        #expect(report.result == .failed)
        let error = try #require(report.error)
        #expect(error.code == .download, "\(error)")
        #expect(error.cause == testCase.cause, "\(error)")
        #expect(error.reason.contains(testCase.reason), "\(error)")
        #expect(h.activeMatches("1.0.0"))
    }

    // MARK: - Patch header

    /// Sets the BSDIFF40 header's new size (8-byte sign-magnitude little-endian at offset 24).
    static func withNewSize(_ size: UInt64, _ patch: [UInt8]) -> [UInt8] {
        var copy = patch
        for i in 0..<8 { copy[24 + i] = UInt8(truncatingIfNeeded: size >> (8 * UInt64(i))) }
        return copy
    }

    @Test("a patch header promising more than the cap is not applied; the full package installs",
          arguments: [UInt64(Int64.max), UInt64(1 << 40)])
    func patchNewSize(_ newSize: UInt64) async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        let gz = try PackageFixture.gzip(h.fixture.bytes("1.1.0"))
        h.origin.put("1.1.0.zip.gz", gz)
        let hostile = Self.withNewSize(newSize, try h.fixture.patch(from: "1.0.0", to: "1.1.0"))
        h.origin.put("hostile.bsdiff", hostile)
        // Compressed full fallback: no fullSize of the zip itself bounds the patch output.
        h.origin.setManifest(try h.patch(from: "1.0.0", to: "1.1.0", [
            "url": "files/hostile.bsdiff", "size": hostile.count, "sha256": PackageFixture.sha256(hostile),
            "compression": "gzip", "fullUrl": "files/1.1.0.zip.gz", "fullSize": gz.count, "fullSha256": PackageFixture.sha256(gz),
        ]))
        let report = await h.sync()
        #expect(report.result == .updated, "\(report.error?.description ?? "")")
        #expect(report.via == .full)
        #expect(report.patchFallbackReason?.contains("patch would produce \(newSize) bytes, above the cap") == true,
                "\(report.patchFallbackReason ?? "no fallback")")
        #expect(h.activeMatches("1.1.0"))
    }
}
