import Foundation
import Testing
@testable import OfflineAgent
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// SIGINT and SIGTERM in the middle of a real download: one line per app saying what
/// was kept, exit 130 / 143, and no check counted, so the next plain run resumes at once.
@Suite("Sync interruption", .serialized)
struct SyncInterruptionTests {
    /// A harness offering a 256 KiB stored package served 2 KiB every 20 ms (~3 s in all).
    static func slowHarness() throws -> (SyncHarness, [UInt8]) {
        let h = try SyncHarness()
        var zip = ZipBuilder()
        zip.file("index.html", "<p>big</p>")
        var generator = SplitMix64(seed: 30)
        zip.file("big.bin", (0..<(256 << 10)).map { _ in UInt8(truncatingIfNeeded: generator.next()) })
        let bytes = zip.build()
        h.origin.put("big.zip", bytes)
        let sha = PackageFixture.sha256(bytes)
        h.origin.setManifest([
            "app": "mall", "version": "2.0.0", "miniVersion": "1.0.0", "isPatch": false, "url": "files/big.zip",
            "size": bytes.count, "sha256": sha, "packageSha256": sha, "whitelist": [SyncHarness.whitelist],
        ])
        h.origin.slow("big.zip", chunk: 2048, pause: 0.02)
        return (h, bytes)
    }

    /// Starts a sync and sends `signal` once 32 KiB of the package are on disk. The
    /// server sends those and then holds the connection (however slowly this test's task
    /// is scheduled, the download is still under way when the signal comes).
    static func interrupt(_ h: SyncHarness, with signal: Int32, json: Bool = false) async throws -> (CLI.Result, Int64) {
        h.origin.override("big.zip") { request, bytes in
            var reply = Origin.serve(bytes, request: request)
            reply.ending = .hold(afterBodyBytes: 32 << 10, seconds: 120)
            return reply
        }
        return try await interrupt(h, with: signal, json: json, once: 32 << 10)
    }

    /// Starts a sync and sends `signal` once `bytes` of the package are in its `.part`.
    static func interrupt(_ h: SyncHarness, with signal: Int32, json: Bool = false, once bytes: Int64) async throws -> (CLI.Result, Int64) {
        let arguments = ["sync", "--allow-unsigned", "--root", h.root.path, "--app", "mall", "--manifest", h.origin.manifestURL.absoluteString]
        let running = try CLI.start(arguments + (json ? ["--json"] : []))
        let downloads = Store(root: h.root.path).downloadsDirectory("mall")
        let pid = running.process.processIdentifier
        // Watched and signalled from a thread of its own: on a loaded machine the
        // cooperative pool can leave a sleeping task unscheduled for longer than the
        // agent's read timeout.
        let partial = await withCheckedContinuation { (done: CheckedContinuation<Int64, Never>) in
            Thread.detachNewThread {
                let deadline = Date().addingTimeInterval(120)
                var partial: Int64 = 0
                while Date() < deadline, running.process.isRunning {
                    partial = ((try? FileManager.default.contentsOfDirectory(atPath: downloads)) ?? [])
                        .filter { $0.hasSuffix(".part") }.compactMap { FileSystem.fileSize("\(downloads)/\($0)") }.max() ?? 0
                    if partial >= bytes { break }
                    Thread.sleep(forTimeInterval: 0.02)
                }
                kill(pid, signal)
                done.resume(returning: partial)
            }
        }
        return (await CLI.finish(running), partial)
    }

    @Test("SIGINT mid-download: one line saying what was kept, exit 130; the next plain run resumes at once with Range")
    func sigint() async throws {
        let (h, bytes) = try Self.slowHarness()
        let (result, partial) = try await Self.interrupt(h, with: SIGINT)
        #expect(partial >= 32 << 10, "the download was under way: \(result.stderr)")
        #expect(!result.signaled && result.status == 130, "\(result.status) \(result.stderr)")
        let lines = result.stderr.split(separator: "\n")
        #expect(lines.count == 1, "\(result.stderr)")
        let line = String(lines.first ?? "")
        #expect(line.hasPrefix("mall: interrupted: "), "\(line)")
        #expect(line.contains("bytes of the download of 2.0.0 kept; the next sync resumes from there (not counted as a check); nothing is installed yet"), "\(line)")
        #expect(result.stdout.isEmpty)

        // Not throttled: the next plain run (no --force) goes on, asking only for the rest.
        h.origin.clearOverrides()
        let next = try await CLI.run(["sync", "--allow-unsigned", "--root", h.root.path, "--app", "mall",
                                      "--manifest", h.origin.manifestURL.absoluteString, "--json"])
        let report = try #require(CLI.json(next.stdout), "\(next.stderr)")
        #expect(report["result"] as? String == "updated", "\(report)")
        let ranges = h.origin.requests(for: "/files/big.zip").compactMap { $0.header("Range") }
        let offset = ranges.last.flatMap { Int($0.dropFirst("bytes=".count).prefix { $0 != "-" }) } ?? 0
        #expect(offset >= 32 << 10, "\(ranges)")
        #expect((report["bytesDownloaded"] as? Int ?? .max) <= bytes.count - offset, "\(report)")
    }

    @Test("SIGTERM mid-download: exit 143, and --json stays one object per app")
    func sigterm() async throws {
        let (h, _) = try Self.slowHarness()
        let (result, _) = try await Self.interrupt(h, with: SIGTERM, json: true)
        #expect(!result.signaled && result.status == 143, "\(result.status) \(result.stderr)")
        #expect(result.stdout.split(separator: "\n").count == 1, "\(result.stdout)")
        let report = try #require(CLI.json(result.stdout))
        #expect(report["result"] as? String == "failed" && report["errorCode"] as? String == "cancelled", "\(report)")
        // No check was counted: status shows no last check and the next plain run is not throttled.
        let status = try #require(CLI.json(try await CLI.run(["status", "--root", h.root.path, "--app", "mall", "--json"]).stdout))
        #expect(status["lastCheck"] is NSNull, "\(status)")
        #expect(status["failures"] as? Int == 0, "\(status)")
    }

    @Test("SIGINT once every byte of the package arrived (its body's end not yet): the next sync installs the kept file without asking for it")
    func sigintAfterLastByte() async throws {
        let (h, bytes) = try Self.slowHarness()
        h.origin.override("big.zip") { request, bytes in
            var reply = Origin.serve(bytes, request: request)
            reply.headers.append(("Transfer-Encoding", "chunked"))
            reply.ending = .holdBeforeLastChunk(seconds: 120)
            return reply
        }
        let (result, partial) = try await Self.interrupt(h, with: SIGINT, once: Int64(bytes.count))
        #expect(partial == Int64(bytes.count), "every byte was on disk: \(result.stderr)")
        #expect(!result.signaled && result.status == 130, "\(result.status) \(result.stderr)")
        // Every byte kept (its resume record beside it counts too).
        let kept = result.stderr.split(separator: "mall: interrupted: ").last.flatMap { Int($0.prefix { $0.isNumber }) } ?? 0
        #expect(kept >= bytes.count && result.stderr.contains(" bytes of the download of 2.0.0 kept"), "\(result.stderr)")

        h.origin.clearOverrides()
        let next = try await CLI.run(["sync", "--allow-unsigned", "--root", h.root.path, "--app", "mall",
                                      "--manifest", h.origin.manifestURL.absoluteString, "--json"])
        let report = try #require(CLI.json(next.stdout), "\(next.stderr)")
        #expect(report["result"] as? String == "updated", "\(report)")
        #expect(report["bytesDownloaded"] as? Int == 0, "\(report)")
        // Its SHA-256 matched: the one request is the interrupted one.
        let requests = h.origin.requests(for: "/files/big.zip")
        #expect(requests.count == 1, "\(requests.map(\.headers))")
        #expect(Store(root: h.root.path).active("mall")?.version.description == "2.0.0")
    }

    @Test("SIGINT while the package is being extracted: the install completes, its line says updated, exit 0")
    func sigintDuringInstall() async throws {
        let (h, _) = try Self.slowHarness()
        h.origin.clearOverrides()
        let scratch = TemporaryDirectory("pause")
        let pause = scratch.file("pause")
        let running = try CLI.start(
            ["sync", "--allow-unsigned", "--root", h.root.path, "--app", "mall", "--manifest", h.origin.manifestURL.absoluteString],
            environment: ["OFFLINE_AGENT_PAUSE_AT": "during-extract", "OFFLINE_AGENT_PAUSE_FILE": pause])
        let paused = await Self.interruptPaused(running, pause: pause) { true }
        let result = await CLI.finish(running)
        #expect(paused, "the sync reached the extraction: \(result.stderr)")
        #expect(!result.signaled && result.status == 0, "\(result.status) \(result.stderr)")
        let lines = result.stderr.split(separator: "\n")
        #expect(lines.count == 1 && lines.first?.hasPrefix("mall: updated none -> 2.0.0 via full") == true, "\(result.stderr)")
        #expect(Store(root: h.root.path).active("mall")?.version.description == "2.0.0")
    }

    @Test("SIGINT while one app of a batch is extracted and another downloads: the first says updated, the second interrupted, exit 130")
    func sigintBatch() async throws {
        let (h, bytes) = try Self.slowHarness()
        h.origin.override("big.zip") { request, bytes in
            var reply = Origin.serve(bytes, request: request)
            reply.ending = .hold(afterBodyBytes: 32 << 10, seconds: 120)
            return reply
        }
        var zip = ZipBuilder()
        zip.file("index.html", "<p>shop</p>")
        // The pause point follows the second entry an extraction writes.
        zip.file("app.js", "console.log('shop')")
        let shop = zip.build()
        h.origin.put("shop.zip", shop)
        let manifests: [String: [String: Any]] = [
            "mall": ["app": "mall", "version": "2.0.0", "miniVersion": "1.0.0", "isPatch": false, "url": "files/big.zip", "size": bytes.count,
                     "sha256": PackageFixture.sha256(bytes), "packageSha256": PackageFixture.sha256(bytes), "whitelist": [SyncHarness.whitelist]],
            "shop": ["app": "shop", "version": "1.0.0", "miniVersion": "1.0.0", "isPatch": false, "url": "files/shop.zip", "size": shop.count,
                     "sha256": PackageFixture.sha256(shop), "packageSha256": PackageFixture.sha256(shop), "whitelist": ["https://shop.example.com/shop/"]],
        ]
        let bodies = manifests.mapValues { try! JSONSerialization.data(withJSONObject: $0, options: [.sortedKeys]) }
        h.origin.setManifestReply { request in
            guard let body = request.query["app"].flatMap({ bodies[$0] }) else { return .status(404) }
            return .ok([UInt8](body))
        }
        let scratch = TemporaryDirectory("batch")
        let config = scratch.file("agent.json")
        let url = h.origin.manifestURL.absoluteString
        try JSONSerialization.data(withJSONObject: [
            "root": h.root.path, "allowUnsigned": true, "apps": [["app": "mall", "manifest": url], ["app": "shop", "manifest": url]],
        ]).write(to: URL(fileURLWithPath: config))
        let pause = scratch.file("pause")
        let running = try CLI.start(["sync", "--config", config],
                                    environment: ["OFFLINE_AGENT_PAUSE_AT": "during-extract", "OFFLINE_AGENT_PAUSE_FILE": pause])
        let downloads = Store(root: h.root.path).downloadsDirectory("mall")
        // Both under way: shop's extraction waits after its second entry, mall's download holds.
        let ready = await Self.interruptPaused(running, pause: pause) {
            ((try? FileManager.default.contentsOfDirectory(atPath: downloads)) ?? [])
                .filter { $0.hasSuffix(".part") }.compactMap { FileSystem.fileSize("\(downloads)/\($0)") }.max() ?? 0 >= 32 << 10
        }
        let result = await CLI.finish(running)
        #expect(ready, "shop extracting and mall downloading: \(result.stderr)")
        #expect(!result.signaled && result.status == 130, "\(result.status) \(result.stderr)")
        let lines = result.stderr.split(separator: "\n").map(String.init)
        #expect(lines.count == 2, "\(result.stderr)")
        #expect(lines.first?.hasPrefix("mall: interrupted: ") == true && lines.first?.hasSuffix("nothing is installed yet") == true, "\(lines)")
        #expect(lines.last?.hasPrefix("shop: updated none -> 1.0.0 via full") == true, "\(lines)")
        let store = Store(root: h.root.path)
        #expect(store.active("shop")?.version.description == "1.0.0" && store.active("mall") == nil)
    }

    /// Sends SIGINT once the process waits at its pause point (`pause` exists) and `also`
    /// holds, waits until the process took the signal, then lets it go on; whether both held.
    /// From a thread of its own (see `interrupt`); every wait is bounded.
    static func interruptPaused(_ running: CLI.Running, pause: String, also: @escaping @Sendable () -> Bool) async -> Bool {
        let pid = running.process.processIdentifier
        return await withCheckedContinuation { (done: CheckedContinuation<Bool, Never>) in
            Thread.detachNewThread {
                let ready = { FileManager.default.fileExists(atPath: pause) && also() }
                var waits = 0
                while waits < 6000, running.process.isRunning, !ready() {
                    Thread.sleep(forTimeInterval: 0.02)
                    waits += 1
                }
                let reached = ready()
                kill(pid, SIGINT)
                waits = 0
                while waits < 6000, running.process.isRunning, pending(SIGINT, in: pid) {
                    Thread.sleep(forTimeInterval: 0.01)
                    waits += 1
                }
                try? FileManager.default.removeItem(atPath: pause)
                done.resume(returning: reached)
            }
        }
    }

    /// Whether `signal` is pending for the process (sent, not yet read by its signal source).
    static func pending(_ signal: Int32, in pid: pid_t) -> Bool {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return false }
        let masks = status.split(separator: "\n").filter { $0.hasPrefix("ShdPnd:") || $0.hasPrefix("SigPnd:") }
            .compactMap { UInt64($0.split(separator: "\t").last ?? "", radix: 16) }
        return masks.contains { $0 & (1 << UInt64(signal - 1)) != 0 }
    }
}
