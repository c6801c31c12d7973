import Foundation
import Testing
@testable import OfflineAgent
import TestSupport

/// `Agent.events` fans out to every subscriber; `startSync` and `progress:` follow one sync.
@Suite("Progress events")
struct ProgressEventTests {
    @Test("two subscribers each receive the whole event sequence of a sync")
    func twoSubscribers() async throws {
        let h = try SyncHarness()
        h.origin.setManifest(h.full("1.0.0"))
        let agent = h.agent()
        let first = agent.events, second = agent.events
        let readers = [Task { await Self.collect(first) }, Task { await Self.collect(second) }]
        let report = await agent.sync(app: "mall", manifest: h.origin.manifestURL, options: SyncOptions(force: true))
        #expect(report.result == .updated)
        await agent.shutdown()
        let a = try await Self.bounded { await readers[0].value }
        let b = try await Self.bounded { await readers[1].value }
        #expect(a == b)
        #expect(a.map(\.phase).first == .checking)
        #expect(a.last == ProgressEvent(app: "mall", phase: .done))
        #expect(Set(a.map(\.phase)).isSuperset(of: [.checking, .downloading, .extracting, .installing, .done]))
        #expect(a.allSatisfy { $0.app == "mall" })
    }

    @Test("a subscriber added later gets only the later events")
    func laterSubscriber() async throws {
        let h = try SyncHarness()
        let agent = h.agent()
        let early = agent.events
        let earlyReader = Task { await Self.collect(early) }
        h.origin.setManifest(h.full("1.0.0"))
        #expect(await agent.sync(app: "mall", manifest: h.origin.manifestURL, options: SyncOptions(force: true)).result == .updated)
        let late = agent.events
        let lateReader = Task { await Self.collect(late) }
        h.origin.setManifest(h.full("1.1.0"))
        #expect(await agent.sync(app: "mall", manifest: h.origin.manifestURL, options: SyncOptions(force: true)).result == .updated)
        await agent.shutdown()
        let all = try await Self.bounded { await earlyReader.value }
        let later = try await Self.bounded { await lateReader.value }
        #expect(all.filter { $0.phase == .done }.count == 2)
        #expect(later.filter { $0.phase == .done }.count == 1)
        // The late reader's events are exactly the second sync's: the tail of the early reader's.
        let firstDone = try #require(all.firstIndex { $0.phase == .done })
        #expect(Array(all[(firstDone + 1)...]) == later)
        #expect(later.first?.phase == .checking)
    }

    @Test("a cancelled or dropped subscriber is removed, and one that never reads blocks nobody")
    func cancelledSubscriber() async throws {
        let h = try SyncHarness()
        h.origin.setManifest(h.full("1.0.0"))
        let agent = h.agent()
        let cancelled = agent.events
        let reader = Task { for await _ in cancelled {} }
        #expect(agent.broadcaster.count == 1)
        reader.cancel()
        try await Self.bounded { await reader.value }
        #expect(agent.broadcaster.count == 0)
        do { _ = agent.events }  // dropped at once
        #expect(agent.broadcaster.count == 0)

        let stalled = agent.events  // subscribed, never read
        let live = agent.events
        let liveReader = Task { await Self.collect(live) }
        #expect(agent.broadcaster.count == 2)
        let report = try await Self.bounded {
            await agent.sync(app: "mall", manifest: h.origin.manifestURL, options: SyncOptions(force: true))
        }
        #expect(report.result == .updated)
        await agent.shutdown()
        let events = try await Self.bounded { await liveReader.value }
        #expect(events.map(\.phase).first == .checking)
        #expect(events.last?.phase == .done)
        // The stalled one kept what arrived (within its bound) and finished with the others.
        let kept = try await Self.bounded { await Self.collect(stalled) }
        #expect(kept == events)
        #expect(agent.broadcaster.count == 0)
        // After shutdown a new subscription is already finished.
        #expect(try await Self.bounded { await Self.collect(agent.events) }.isEmpty)
    }

    @Test("the per-sync stream carries only its sync and finishes after success")
    func perSyncSuccess() async throws {
        let h = try SyncHarness()
        h.origin.setManifest(h.full("1.0.0"))
        let agent = h.agent()
        let sync = agent.startSync(SyncRequest(app: "mall", manifest: h.origin.manifestURL, options: SyncOptions(force: true)))
        let events = try await Self.bounded { await Self.collect(sync.events) }
        let report = await sync.value
        #expect(report.result == .updated)
        #expect(events.map(\.phase).first == .checking)
        #expect(events.last == ProgressEvent(app: "mall", phase: .done))
        #expect(events.filter { $0.phase == .done }.count == 1)
        #expect(h.activeMatches("1.0.0"))

        // The handler form sees the same sequence, before `sync` returns.
        h.origin.setManifest(h.full("1.1.0"))
        let seen = Recorder()
        let second = await agent.sync(app: "mall", manifest: h.origin.manifestURL, options: SyncOptions(force: true)) { seen.add($0) }
        #expect(second.result == .updated)
        #expect(seen.events.last == ProgressEvent(app: "mall", phase: .done))
        #expect(seen.events.map(\.phase).contains(.extracting))
    }

    @Test("the per-sync stream finishes after a failure (a server that never answers)")
    func perSyncFailure() async throws {
        let h = try SyncHarness()
        h.configuration.network.manifestTimeout = .seconds(2)
        h.origin.setManifestReply { _ in
            ScriptedServer.Reply(status: 200, headers: [("Content-Length", "500")], body: [], ending: .stall(seconds: 30))
        }
        let agent = h.agent()
        let sync = agent.startSync(SyncRequest(app: "mall", manifest: h.origin.manifestURL, options: SyncOptions(force: true)))
        let events = try await Self.bounded { await Self.collect(sync.events) }
        let report = await sync.value
        #expect(report.result == .failed)
        #expect(report.error?.cause == .timeout, "\(String(describing: report.error))")
        #expect(events.map(\.phase) == [.checking, .done])
        #expect(h.active == nil)
    }

    @Test("the per-sync stream finishes after cancellation; the installed version stays whole")
    func perSyncCancellation() async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        h.origin.setManifest(h.full("1.1.0"))
        // A slow link: the download is still running when the sync is cancelled.
        h.origin.slow("1.1.0.zip", chunk: 256, pause: 0.05)
        let agent = h.agent()
        let sync = agent.startSync(SyncRequest(app: "mall", manifest: h.origin.manifestURL, options: SyncOptions(force: true)))
        let events = try await Self.bounded { () async -> [ProgressEvent] in
            var events: [ProgressEvent] = []
            for await event in sync.events {
                events.append(event)
                if event.phase == .downloading, event.completed > 0, !sync.isCancelled { sync.cancel() }
            }
            return events
        }
        let report = await sync.value
        #expect(sync.isCancelled)
        #expect(report.result == .failed)
        #expect(report.error?.cause == .cancelled, "\(String(describing: report.error))")
        #expect(events.last == ProgressEvent(app: "mall", phase: .done))
        #expect(!events.map(\.phase).contains(.extracting))
        #expect(report.version?.description == "1.0.0")
        #expect(h.activeMatches("1.0.0"))
        // Cancelling is the host's doing: no failed check is counted against the server.
        #expect(BackoffState.load(h.store, app: "mall") == nil)
    }

    @Test("a shut-down agent refuses to sync, with the cancelled cause")
    func shutDownAgent() async throws {
        let h = try SyncHarness()
        h.origin.setManifest(h.full("1.0.0"))
        let agent = h.agent()
        await agent.shutdown()
        let sync = agent.startSync(SyncRequest(app: "mall", manifest: h.origin.manifestURL, options: SyncOptions(force: true)))
        let events = try await Self.bounded { await Self.collect(sync.events) }
        let report = await sync.value
        #expect(report.error?.cause == .cancelled)
        #expect(events == [ProgressEvent(app: "mall", phase: .done)])
        #expect(h.active == nil)
        #expect(h.origin.requests.isEmpty)
    }

    @Test("two apps at once: each per-sync stream sees only its app; a batch's events carry the app")
    func twoApps() async throws {
        let h = try SyncHarness()
        let manifests = ["mall": h.full("1.0.0"), "shop": h.full("1.1.0", ["app": "shop", "whitelist": ["https://shop.example.com/"]])]
            .mapValues { try! JSONSerialization.data(withJSONObject: $0, options: [.sortedKeys]) }
        h.origin.setManifestReply { request in .ok([UInt8](manifests[request.query["app"] ?? ""] ?? Data())) }
        let agent = h.agent()
        let all = agent.events
        let allReader = Task { await Self.collect(all) }
        let apps = ["mall", "shop"]

        // Separate syncs, started together: one may find the root busy, each still ends its own stream.
        let syncs = apps.map { agent.startSync(SyncRequest(app: $0, manifest: h.origin.manifestURL, options: SyncOptions(force: true))) }
        for (app, sync) in zip(apps, syncs) {
            let events = try await Self.bounded { await Self.collect(sync.events) }
            let report = await sync.value
            #expect(events.allSatisfy { $0.app == app }, "\(app): \(events)")
            #expect(events.last == ProgressEvent(app: app, phase: .done))
            #expect(report.result == .updated || report.error?.cause == .busy, "\(app): \(report)")
        }

        // One batch: one stream, both apps, each app's events complete and in order.
        let batch = agent.startSync(apps.map { SyncRequest(app: $0, manifest: h.origin.manifestURL, options: SyncOptions(force: true)) })
        let events = try await Self.bounded { await Self.collect(batch.events) }
        let reports = await batch.value
        #expect(reports.allSatisfy { $0.result == .updated || $0.result == .upToDate }, "\(reports)")
        for app in apps {
            let own = events.filter { $0.app == app }
            #expect(own.first?.phase == .checking, "\(app): \(own)")
            #expect(own.last == ProgressEvent(app: app, phase: .done))
            #expect(own.filter { $0.phase == .done }.count == 1)
        }
        await agent.shutdown()
        let everything = try await Self.bounded { await allReader.value }
        #expect(Set(everything.map(\.app)) == Set(apps))
        #expect(everything.filter { $0.phase == .done }.count == 4)
    }

    // MARK: - Helpers

    static func collect(_ stream: AsyncStream<ProgressEvent>) async -> [ProgressEvent] {
        var events: [ProgressEvent] = []
        for await event in stream { events.append(event) }
        return events
    }

    struct TimedOut: Error {}

    /// Runs `body`, failing once `seconds` pass: no test waits forever for a stream to end.
    @discardableResult
    static func bounded<T: Sendable>(_ seconds: Double = 300, _ body: @escaping @Sendable () async -> T) async throws -> T {
        try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask { await body() }
            group.addTask {
                try? await Task.sleep(for: .seconds(seconds))
                return nil
            }
            let first = try await group.next()!
            group.cancelAll()
            guard let first else { throw TimedOut() }
            return first
        }
    }
}
