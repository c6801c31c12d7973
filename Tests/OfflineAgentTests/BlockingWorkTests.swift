import Crypto
import Foundation
import Synchronization
import Testing
@testable import OfflineAgent
import TestSupport

/// Blocking work runs on the agent's own threads: a host app's async code keeps
/// running on Swift's cooperative pool while an update installs.
@Suite("Blocking work off the cooperative pool")
struct BlockingWorkTests {
    /// What the probe saw, from whichever thread ran it.
    final class Probe: Sendable {
        private let state = Mutex<(ran: Bool, ranBeforeInstalling: Bool?)>((false, nil))
        func run() { state.withLock { $0.ran = true } }
        func installing() { state.withLock { $0.ranBeforeInstalling = $0.ran } }
        var ranBeforeInstalling: Bool? { state.withLock { $0.ranBeforeInstalling } }
    }

    final class Counter: Sendable {
        private let state = Mutex(0)
        func add() { state.withLock { $0 += 1 } }
        var value: Int { state.withLock { $0 } }
    }

    @Test("while a large package extracts, a task on the cooperative pool still runs")
    func extractionLeavesCooperativeThreadFree() async throws {
        // Random bytes, stored: nothing compresses, so extraction writes every byte (24 MB).
        var random = SplitMix64(seed: 0x5eed)
        var zip = ZipBuilder()
        var files: [String: [UInt8]] = [:]
        for index in 0..<3 {
            let words = (0..<(1 << 20)).map { _ in random.next() }
            let bytes = words.withUnsafeBytes { Array($0) }
            files["data/\(index).bin"] = bytes
            zip.file("data/\(index).bin", bytes)
        }
        zip.file("index.html", "<html>large</html>")
        let package = zip.build()
        let h = try SyncHarness()
        h.origin.put("large.zip", package)
        let sha = PackageFixture.sha256(package)
        h.origin.setManifest(h.full("1.0.0", ["url": "files/large.zip", "size": package.count, "sha256": sha, "packageSha256": sha]))

        // When extraction starts, every cooperative thread but the sync's is occupied by
        // a test task that blocks (bounded) until the install ends: the sync and the
        // probe then share the last thread. Extraction on a cooperative thread
        // would hold it until the install ends, and the probe could not run. The window is
        // kept short: other suites run in this process too.
        let width = max(1, ProcessInfo.processInfo.activeProcessorCount)
        let release = DispatchSemaphore(value: 0)
        let started = DispatchSemaphore(value: 0)
        let hogs = Counter()
        let probe = Probe()
        let releaseHogs: @Sendable () -> Void = { for _ in 0..<hogs.value { release.signal() } }
        let report = await h.agent().sync(app: "mall", manifest: h.origin.manifestURL, options: SyncOptions(force: true)) { event in
            switch event.phase {
            case .extracting:
                for _ in 0..<(width - 1) {
                    hogs.add()
                    Task.detached {
                        started.signal()
                        _ = release.wait(timeout: .now() + 60)
                    }
                }
                for _ in 0..<(width - 1) { _ = started.wait(timeout: .now() + 30) }
                Task.detached { probe.run() }
            case .installing:
                probe.installing()
                releaseHogs()
            default:
                break
            }
        }
        if probe.ranBeforeInstalling == nil { releaseHogs() }
        #expect(report.result == .updated, "\(String(describing: report.error))")
        #expect(hogs.value == width - 1)
        #expect(probe.ranBeforeInstalling == true, "a cooperative task waited for the whole extraction")
        let active = try #require(h.store.active("mall"))
        let dir = h.store.versionDirectory("mall", active.version)
        for (name, bytes) in files {
            #expect(FileManager.default.contents(atPath: "\(dir)/\(name)") == Data(bytes), "\(name)")
        }
    }

    @Test("the pool runs work, reports a cancelled task's skipped work and stops at shutdown")
    func poolLifecycle() async throws {
        let pool = BlockingPool(threads: 1)
        #expect(try await pool.run(.install) { 6 * 7 } == 42)
        let skipped = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await pool.run(.patch) { 1 }
        }
        let error = await #expect(throws: OfflineAgentError.self) { try await skipped.value }
        #expect(error?.cause == .cancelled)
        #expect(error?.code == .patch)
        // Bookkeeping that must follow done work runs even for a cancelled task.
        let kept = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await pool.run(.install, cancellable: false) { 2 }
        }
        #expect(try await kept.value == 2)
        await pool.shutdown()
        #expect(pool.isShutDown)
        let late = await #expect(throws: OfflineAgentError.self) { try await pool.run(.extract) { 3 } }
        #expect(late?.cause == .cancelled)
    }

    @Test("a pool dropped without shutdown stops its threads")
    func droppedPoolStops() async throws {
        var pool: BlockingPool? = BlockingPool(threads: 1)
        // The pool's thread, as "/proc/PID/task/TID".
        let task = try await pool!.run(.install) { "/proc/" + (try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/thread-self")) }
        #expect(FileManager.default.fileExists(atPath: task))
        pool = nil
        // Bounded: a thread left idle for good, not a speed.
        for _ in 0..<12_000 where FileManager.default.fileExists(atPath: task) { try await Task.sleep(for: .milliseconds(10)) }
        #expect(!FileManager.default.fileExists(atPath: task), "\(task): the dropped pool's thread is still there")
    }
}
