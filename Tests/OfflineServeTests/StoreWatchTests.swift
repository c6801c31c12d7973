import Foundation
import Synchronization
import Testing
@testable import OfflineAgent
@testable import OfflineServe
import TestSupport

/// `LocalStoreWatch`: while the store is unchanged, `serve`'s kept pins and mirror
/// snapshots are not checked against the files; any change is seen by the very next
/// request, watched or not.
@Suite("LocalStoreWatch")
struct StoreWatchTests {
    /// Versions over a watch of their own (the servers' shared one sees other tests' stores).
    static func versions(_ f: LocalStoreFixture, watched: Bool) throws -> LocalVersions {
        let watch = LocalStoreWatch(enabled: watched)
        try #require(watch.isActive == watched, "no inotify instance")
        return LocalVersions(resolver: Resolver(store: f.store, deviceID: "device"), watch: watch)
    }

    @Test("a kept pin costs no check while the store is unchanged; a swap is seen at once; after another change it is checked once",
          arguments: [true, false])
    func keptPin(watched: Bool) throws {
        let f = LocalStoreFixture()
        try f.add(version: "1.0.0")
        let versions = try Self.versions(f, watched: watched)
        let first = try #require(versions.pin("mall"))
        #expect(first.version.description == "1.0.0")
        for _ in 0..<5 { #expect(versions.keptPin("mall") === first) }
        #expect(versions.checks.load(ordering: .relaxed) == (watched ? 0 : 5))

        // A swap: the very next look sees it, without waiting for anything.
        try f.add(version: "2.0.0")
        #expect(versions.keptPin("mall") == nil)
        let second = try #require(versions.pin("mall"))
        #expect(second.version.description == "2.0.0")

        // A change that leaves the pin standing (a file written in the app's directory):
        // checked once, then kept for the new generation.
        let before = versions.checks.load(ordering: .relaxed)
        try Data("{}".utf8).write(to: URL(fileURLWithPath: f.root.path + "/apps/mall/backoff.json"))
        for _ in 0..<5 { #expect(versions.keptPin("mall") === second) }
        #expect(versions.checks.load(ordering: .relaxed) - before == (watched ? 1 : 5))

        // A record rewritten in place (a new rollout) is a change too.
        let record = try #require(f.store.active("mall"))
        var rewritten = record
        rewritten.rollout = 0
        try f.store.updateRecord(rewritten, app: "mall")
        #expect(versions.keptPin("mall") == nil)
        #expect(versions.pin("mall")?.fallback != nil)
    }

    @Test("an app's directory replaced while watched: the new one is watched and its swap seen")
    func replacedApp() throws {
        let f = LocalStoreFixture()
        try f.add(version: "1.0.0")
        let versions = try Self.versions(f, watched: true)
        #expect(versions.pin("mall")?.version.description == "1.0.0")
        try FileManager.default.removeItem(atPath: f.root.path + "/apps/mall")
        #expect(versions.keptPin("mall") == nil)
        #expect(versions.pin("mall") == nil)
        try f.add(version: "3.0.0")
        #expect(versions.pin("mall")?.version.description == "3.0.0")
        try f.add(version: "4.0.0")
        #expect(versions.keptPin("mall") == nil, "a swap in the new directory went unseen")
        #expect(versions.pin("mall")?.version.description == "4.0.0")
    }

    /// Set to stop the threads of `concurrentCallers`.
    private final class Stop: Sendable {
        let flag = Atomic<Bool>(false)
    }

    @Test("threads taking the events as fast as they come never hide a change: every look after a write sees a new generation")
    func concurrentCallers() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("store-watch-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let watch = LocalStoreWatch()
        try #require(watch.isActive, "no inotify instance")
        try #require(watch.watch(appsDirectory: directory.path, apps: []))
        // Two threads look without pause, as the server's two event loops do under load,
        // so they take most events, often between this thread's write and its look.
        let stop = Stop()
        let done = DispatchGroup()
        for _ in 0..<2 {
            done.enter()
            Thread.detachNewThread {
                while !stop.flag.load(ordering: .relaxed) { _ = watch.generation() }
                done.leave()
            }
        }
        defer {
            stop.flag.store(true, ordering: .relaxed)
            done.wait()
        }
        let file = directory.appendingPathComponent("state.json")
        var stale = 0
        for round in 0..<3000 {
            let before = watch.generation()
            try Data([UInt8(truncatingIfNeeded: round)]).write(to: file)
            if watch.generation() <= before { stale += 1 }
        }
        #expect(stale == 0, "a change queued before the look was hidden by another thread's read")
        #expect(watch.generations.load(ordering: .relaxed) > 0)
    }

    @Test("a look while another caller holds events it has not counted waits for it, and sees the new generation")
    func lookDuringDrain() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("store-watch-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let taken = DispatchSemaphore(value: 0), release = DispatchSemaphore(value: 0)
        // The first drain stops after reading the events, before counting them.
        let first = Stop()
        let watch = LocalStoreWatch(drained: {
            guard !first.flag.exchange(true, ordering: .relaxed) else { return }
            taken.signal()
            release.wait()
        })
        try #require(watch.isActive, "no inotify instance")
        try #require(watch.watch(appsDirectory: directory.path, apps: []))
        let before = watch.generation()
        try Data("{}".utf8).write(to: directory.appendingPathComponent("state.json"))

        let done = DispatchGroup()
        done.enter()
        Thread.detachNewThread {
            _ = watch.generation()
            done.leave()
        }
        try #require(taken.wait(timeout: .now() + 30) == .success, "the write made no event")
        // The queue is empty now, and the generation not yet moved: this look must wait.
        let result = Mutex<UInt64?>(nil)
        done.enter()
        Thread.detachNewThread {
            let generation = watch.generation()
            result.withLock { $0 = generation }
            done.leave()
        }
        // A look that does not wait returns within this pause, with the old generation.
        Thread.sleep(forTimeInterval: 0.2)
        release.signal()
        try #require(done.wait(timeout: .now() + 30) == .success, "a look never returned")
        let seen = try #require(result.withLock { $0 })
        #expect(seen > before, "a look returned the generation from before an event it came after")
    }
}
