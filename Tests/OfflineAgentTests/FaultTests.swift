import Foundation
import Synchronization
import Testing
@testable import OfflineAgent
import TestSupport

/// Lying and broken servers: each sync ends with a clear error or a correct
/// recovery, and the installed version stays whole.
@Suite("Download faults")
struct FaultTests {
    struct Fault: CustomTestStringConvertible, Sendable {
        var label: String
        /// Expected error code, why (the cause), and a fragment of the reason.
        var code: OfflineAgentError.Code
        var cause: OfflineAgentError.Cause
        var reason: String
        var reply: @Sendable (ScriptedServer.Request, [UInt8]) -> ScriptedServer.Reply
        var testDescription: String { label }
    }

    static let faults: [Fault] = [
        Fault(label: "server 500", code: .download, cause: .httpStatus, reason: "500") { _, _ in .status(500) },
        Fault(label: "timeout", code: .download, cause: .timeout, reason: "timed out") { _, bytes in
            ScriptedServer.Reply(status: 200, body: bytes, ending: .stall(seconds: 3))
        },
        Fault(label: "connection reset mid-body", code: .download, cause: .network, reason: "") { _, bytes in
            ScriptedServer.Reply(status: 200, body: bytes, ending: .reset(afterBodyBytes: bytes.count / 2))
        },
        Fault(label: "truncated body", code: .download, cause: .protocolViolation, reason: "") { _, bytes in
            ScriptedServer.Reply(status: 200, body: bytes, ending: .close(afterBodyBytes: bytes.count - 100))
        },
        Fault(label: "body longer than size", code: .download, cause: .protocolViolation, reason: "more than") { _, bytes in
            .ok(bytes + [UInt8](repeating: 0x55, count: 10_000), headers: [("Transfer-Encoding", "chunked")])
        },
        Fault(label: "wrong sha256", code: .download, cause: .hashMismatch, reason: "sha256 mismatch") { _, bytes in
            var copy = bytes
            copy[copy.count / 3] ^= 0xff
            return .ok(copy)
        },
        Fault(label: "wrong size", code: .download, cause: .protocolViolation, reason: "announces") { _, bytes in .ok(Array(bytes.dropLast(7))) },
    ]

    @Test("a broken download fails cleanly and keeps the old version", arguments: faults)
    func downloadFault(_ fault: Fault) async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        let settings = h.configuration.network
        if fault.label == "timeout" { h.configuration.network.readTimeout = .seconds(1) }
        h.origin.override("1.1.0.zip", fault.reply)
        h.origin.setManifest(h.full("1.1.0"))
        let report = await h.sync()
        #expect(report.result == .failed)
        #expect(report.error?.code == fault.code, "\(report.error?.description ?? "")")
        #expect(report.error?.cause == fault.cause, "\(report.error?.description ?? "")")
        if !fault.reason.isEmpty {
            #expect(report.error?.description.contains(fault.reason) == true, "\(report.error?.description ?? "")")
        }
        #expect(h.activeMatches("1.0.0"))
        #expect(report.version?.description == "1.0.0")
        // The origin heals: the next sync completes (with the default timeouts again: a 1 s
        // read timeout is the fault under test, not a condition of healing on a loaded machine).
        h.origin.clearOverrides()
        h.configuration.network = settings
        let healed = await h.sync()
        #expect(healed.result == .updated, "\(healed.error?.description ?? "")")
        #expect(h.activeMatches("1.1.0"))
    }

    @Test("chunked bodies longer than size are cut: never more than size bytes on disk")
    func neverWritesPastSize() async throws {
        let h = try SyncHarness()
        let bytes = h.fixture.bytes("1.0.0")
        let marker = LockedFlag()
        h.origin.override("1.0.0.zip") { _, bytes in
            .ok(bytes + [UInt8](repeating: 0x55, count: 5 << 20), headers: [("Transfer-Encoding", "chunked")])
        }
        h.origin.setManifest(h.full("1.0.0"))
        let watcher = Task.detached {
            // Sample the partial file's size while the download runs.
            while !marker.value {
                for name in (try? FileManager.default.contentsOfDirectory(atPath: h.store.downloadsDirectory("mall"))) ?? [] {
                    let size = FileSystem.fileSize("\(h.store.downloadsDirectory("mall"))/\(name)") ?? 0
                    if !name.hasSuffix(".json"), size > Int64(bytes.count) { marker.overflow = true }
                }
                try? await Task.sleep(for: .milliseconds(1))
            }
        }
        let report = await h.sync()
        marker.value = true
        await watcher.value
        #expect(report.result == .failed)
        #expect(!marker.overflow)
    }

    @Test("an interrupted download resumes with Range and If-Range")
    func resume() async throws {
        let h = try SyncHarness()
        let bytes = h.fixture.bytes("1.0.0")
        let cut = bytes.count / 3
        h.origin.override("1.0.0.zip") { request, bytes in
            var reply = Origin.serve(bytes, request: request)
            reply.ending = .close(afterBodyBytes: cut)
            return reply
        }
        h.origin.setManifest(h.full("1.0.0"))
        #expect(await h.sync().result == .failed)
        h.origin.clearOverrides()
        let report = await h.sync()
        #expect(report.result == .updated, "\(report.error?.description ?? "")")
        #expect(report.bytesDownloaded == Int64(bytes.count - cut))
        let last = try #require(h.origin.requests(for: "/files/1.0.0.zip").last)
        #expect(last.header("Range") == "bytes=\(cut)-")
        #expect(last.header("If-Range") != nil)
        #expect(h.activeMatches("1.0.0"))
    }

    @Test("a server that ignores Range restarts the download from 0")
    func rangeIgnored() async throws {
        let h = try SyncHarness()
        let bytes = h.fixture.bytes("1.0.0")
        h.origin.override("1.0.0.zip") { _, bytes in
            ScriptedServer.Reply(status: 200, body: bytes, ending: .close(afterBodyBytes: bytes.count / 2))
        }
        h.origin.setManifest(h.full("1.0.0"))
        #expect(await h.sync().result == .failed)
        h.origin.override("1.0.0.zip") { _, bytes in .ok(bytes) }
        let report = await h.sync()
        #expect(report.result == .updated, "\(report.error?.description ?? "")")
        #expect(report.bytesDownloaded == Int64(bytes.count))
        #expect(h.origin.requests(for: "/files/1.0.0.zip").last?.header("Range") != nil)
        #expect(h.activeMatches("1.0.0"))
    }

    @Test("a corrupt patch or a missing patch falls back to the full package", arguments: ["corrupt", "404", "wrong base"])
    func patchFallback(_ kind: String) async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        var manifest = try h.patch(from: "1.0.0", to: "1.1.0")
        switch kind {
        case "corrupt":
            // Correctly hashed bytes that are not a valid patch for this base.
            var patch = try h.fixture.patch(from: "1.0.0", to: "1.1.0")
            patch[patch.count - 20] ^= 0xff
            h.origin.put("1.0.0-1.1.0.bsdiff", patch)
            manifest["sha256"] = PackageFixture.sha256(patch)
        case "404":
            manifest["url"] = "files/missing.bsdiff"
        default:
            // A patch made from another base produces a package with the wrong hash.
            let other = try h.fixture.patch(from: "1.2.0", to: "1.1.0")
            h.origin.put("1.0.0-1.1.0.bsdiff", other)
            manifest["size"] = other.count
            manifest["sha256"] = PackageFixture.sha256(other)
        }
        h.origin.setManifest(manifest)
        let report = await h.sync()
        #expect(report.result == .updated, "\(report.error?.description ?? "")")
        #expect(report.via == .full)
        #expect(report.patchFallbackReason != nil)
        #expect(h.activeMatches("1.1.0"))
    }

    @Test("a patch is not applied when the kept package was altered")
    func alteredBase() async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        // A stored package is kept as its skeleton over the objects; a zip only when it cannot be.
        let zip = h.store.packagePath("mall", Version("1.0.0")!)
        let kept = FileSystem.exists(zip) ? zip : h.store.skeletonPath("mall", Version("1.0.0")!)
        let handle = try #require(FileHandle(forWritingAtPath: kept))
        try handle.seek(toOffset: 100)
        handle.write(Data([0xde, 0xad]))
        try handle.close()
        h.origin.setManifest(try h.patch(from: "1.0.0", to: "1.1.0"))
        let report = await h.sync()
        #expect(report.result == .updated)
        #expect(report.via == .full)
        #expect(h.origin.requests(for: "/files/1.0.0-1.1.0.bsdiff").isEmpty)
        #expect(h.activeMatches("1.1.0"))
    }

    @Test("a hostile zip inside a correctly hashed package is refused")
    func hostileZip() async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        var zip = ZipBuilder()
        zip.file("index.html", "<p>pwned</p>")
        zip.file("../../escape.txt", "x")
        let bytes = zip.build()
        h.origin.put("evil.zip", bytes)
        h.origin.setManifest(h.full("1.1.0", ["url": "files/evil.zip", "size": bytes.count,
                                               "sha256": PackageFixture.sha256(bytes), "packageSha256": PackageFixture.sha256(bytes)]))
        let report = await h.sync()
        #expect(report.result == .failed)
        #expect(report.error?.code == .extract)
        #expect(report.error?.cause == .hostileArchive, "\(report.error?.description ?? "")")
        #expect(h.activeMatches("1.0.0"))
        #expect(!FileSystem.exists("\(h.store.appDirectory("mall"))/escape.txt"))
        #expect(!FileSystem.exists("\(h.store.versionsDirectory("mall"))/escape.txt"))
    }

    @Test("https to http redirects are refused; relative and same-scheme ones followed")
    func downgradeRedirect() throws {
        let https = URL(string: "https://cdn.example.com/a/pkg.zip")!
        #expect(throws: OfflineAgentError.self) {
            try HTTPFetcher.redirectTarget(from: https, location: "http://cdn.example.com/a/pkg.zip", phase: .download)
        }
        #expect(throws: OfflineAgentError.self) {
            try HTTPFetcher.redirectTarget(from: https, location: nil, phase: .download)
        }
        #expect(try HTTPFetcher.redirectTarget(from: https, location: "/b/pkg.zip", phase: .download).absoluteString
            == "https://cdn.example.com/b/pkg.zip")
        #expect(try HTTPFetcher.redirectTarget(from: URL(string: "http://x/a")!, location: "https://y/b", phase: .download).absoluteString
            == "https://y/b")
    }

    @Test("redirect loops stop after 10 hops")
    func redirectLimit() async throws {
        let h = try SyncHarness()
        let counter = Counter()
        let server = try ScriptedServer { request in
            counter.increment()
            return .status(302, headers: [("Location", "/r\(counter.value)")])
        }
        h.origin.setManifest(h.full("1.0.0", ["url": "\(server.baseURL)/start"]))
        let report = await h.sync()
        #expect(report.result == .failed)
        #expect(report.error?.reason.contains("redirects") == true, "\(report.error?.description ?? "")")
        #expect(server.requests.count == 11)
    }

    @Test("a slow drip below the minimum speed is aborted")
    func slowDrip() async throws {
        let h = try SyncHarness()
        h.configuration.network.minimumBytesPerSecond = 100_000
        h.configuration.network.speedWindow = .seconds(1)
        h.origin.override("1.0.0.zip") { _, bytes in ScriptedServer.Reply(status: 200, body: bytes, ending: .drip(chunk: 100, pause: 0.05)) }
        h.origin.setManifest(h.full("1.0.0"))
        let report = await h.sync()
        #expect(report.result == .failed)
        #expect(report.error?.reason.contains("slower than") == true, "\(report.error?.description ?? "")")
        #expect(report.error?.cause == .timeout, "\(report.error?.description ?? "")")
    }
}

final class LockedFlag: Sendable {
    private let flags = Mutex((value: false, overflow: false))
    var value: Bool {
        get { flags.withLock { $0.value } }
        set { flags.withLock { $0.value = newValue } }
    }
    var overflow: Bool {
        get { flags.withLock { $0.overflow } }
        set { flags.withLock { $0.overflow = newValue } }
    }
}

final class Counter: Sendable {
    private let count = Mutex(0)
    var value: Int { count.withLock { $0 } }
    func increment() { count.withLock { $0 += 1 } }
}
