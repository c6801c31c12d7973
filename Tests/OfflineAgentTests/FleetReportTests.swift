import Foundation
import OfflineAgent
import Testing
import TestSupport

/// Fleet reports (docs/PROTOCOL.md, "Fleet reports"): the event of each sync and
/// lifecycle transition, checked by a real collector on 127.0.0.1.
@Suite("Fleet reports")
struct FleetReportTests {
    private func harness(_ collector: ReportCollector) throws -> SyncHarness {
        let h = try SyncHarness()
        h.configuration.report = collector.url
        h.configuration.reporting.deadline = .seconds(60)  // generous: two shared cores
        return h
    }

    private func isID(_ value: Any?) -> Bool {
        guard let id = value as? String else { return false }
        return id.count == 32 && id.allSatisfy { "0123456789abcdef".contains($0) }
    }

    @Test("updated via full, then via patch: versions, bytes downloaded and the manifest's full size")
    func updated() async throws {
        let collector = try ReportCollector()
        let h = try harness(collector)
        try await h.install("1.0.0")
        h.origin.setManifest(try h.patch(from: "1.0.0", to: "1.1.0"))
        let report = await h.sync()
        #expect(report.result == .updated && report.via == .patch)
        #expect(await collector.waitForEvents(2))
        let device = try DeviceID.load(root: h.root.path)
        let full = try #require(collector.events.dropFirst(0).first), patch = try #require(collector.events.dropFirst(1).first)
        let fullBytes = h.fixture.bytes("1.0.0").count, patchBytes = try h.fixture.patch(from: "1.0.0", to: "1.1.0").count
        #expect(full["event"] as? String == "updated" && full["via"] as? String == "full")
        #expect(full["version"] as? String == "1.0.0" && full["previousVersion"] == nil)
        #expect(full["bytes"] as? Int == fullBytes && full["fullSize"] as? Int == fullBytes)
        #expect(patch["event"] as? String == "updated" && patch["via"] as? String == "patch")
        #expect(patch["version"] as? String == "1.1.0" && patch["previousVersion"] as? String == "1.0.0")
        #expect(patch["bytes"] as? Int == patchBytes && patch["fullSize"] as? Int == h.fixture.bytes("1.1.0").count)
        for event in [full, patch] {
            #expect(isID(event["id"]) && event["device"] as? String == device && event["app"] as? String == "mall")
            #expect((event["durationMs"] as? Int).map { $0 >= 0 } == true && event["errorCode"] == nil)
        }
        #expect(full["id"] as? String != patch["id"] as? String)
        // Up to date: nothing is sent, and the queue is empty.
        let before = collector.posts
        #expect(await h.sync().result == .upToDate)
        #expect(collector.posts == before && collector.events.count == 2)
    }

    @Test("failed carries the cause code and reason, names the version it tried; the active version stays installed")
    func failed() async throws {
        let collector = try ReportCollector()
        let h = try harness(collector)
        try await h.install("1.0.0")
        let wrong = String(repeating: "0", count: 64)
        h.origin.setManifest(h.full("1.1.0", ["sha256": wrong, "packageSha256": wrong]))
        let report = await h.sync()
        #expect(report.result == .failed && report.error?.cause == .hashMismatch)
        #expect(await collector.waitForEvents(2))
        let event = try #require(collector.events.dropFirst(1).first)
        #expect(event["event"] as? String == "failed" && event["errorCode"] as? String == "hash-mismatch")
        #expect((event["message"] as? String)?.isEmpty == false)
        #expect(event["version"] as? String == "1.1.0" && event["previousVersion"] as? String == "1.0.0")
        #expect(h.activeMatches("1.0.0"))
        #expect(event["bytes"] as? Int == h.fixture.bytes("1.1.0").count && event["via"] == nil)
    }

    @Test("deferred on a metered network names the version that waits")
    func deferred() async throws {
        let collector = try ReportCollector()
        let h = try harness(collector)
        try await h.install("1.0.0")
        h.origin.setManifest(h.full("1.1.0", ["networkType": "wifi"]))
        #expect(await h.sync(network: .metered).result == .deferred)
        #expect(await collector.waitForEvents(2))
        let event = try #require(collector.events.dropFirst(1).first)
        #expect(event["event"] as? String == "deferred" && event["version"] as? String == "1.0.0" && event["bytes"] as? Int == 0)
        #expect((event["message"] as? String)?.contains("1.1.0") == true)
        #expect(event["fullSize"] as? Int == h.fixture.bytes("1.1.0").count)
    }

    @Test("mark good, rollback and mark bad are queued and sent by the next sync, in order")
    func lifecycle() async throws {
        let collector = try ReportCollector()
        let h = try harness(collector)
        try await h.install("1.0.0")
        try await h.install("1.1.0")
        let agent = h.agent()
        try await agent.markGood(app: "mall")
        try await agent.rollback(app: "mall")
        try await agent.markBad(app: "mall", reason: "crashes at start")
        // A throttled sync checks nothing, but sends what is queued.
        #expect(await h.sync(force: false).result == .throttled)
        #expect(await collector.waitForEvents(5))
        let kinds = collector.events.map { $0["event"] as? String ?? "" }
        #expect(kinds == ["updated", "updated", "marked-good", "rolled-back", "marked-bad"])
        let good = try #require(collector.events.dropFirst(2).first), back = try #require(collector.events.dropFirst(3).first)
        let bad = try #require(collector.events.dropFirst(4).first)
        #expect(good["version"] as? String == "1.1.0")
        #expect(back["version"] as? String == "1.0.0" && back["previousVersion"] as? String == "1.1.0")
        #expect(bad["version"] == nil && bad["previousVersion"] as? String == "1.0.0")
        #expect(bad["message"] as? String == "crashes at start")
        #expect(bad["bytes"] as? Int == 0 && bad["durationMs"] as? Int == 0)
    }

    @Test("a sync without a report URL stops the app's lifecycle reports")
    func forgotten() async throws {
        let collector = try ReportCollector()
        let h = try harness(collector)
        try await h.install("1.0.0")
        #expect(await collector.waitForEvents(1))
        h.configuration.report = nil
        h.origin.setManifest(h.full("1.0.0"))
        #expect(await h.sync().result == .upToDate)
        try await h.agent().markGood(app: "mall")
        h.configuration.report = collector.url
        _ = await h.sync(force: false)
        #expect(collector.events.count == 1)
    }

    @Test("batches hold at most batchSize events, oldest first", arguments: [(7, 3, [3, 3, 1]), (1001, 500, [500, 500, 1])])
    func batching(count: Int, size: Int, expected: [Int]) async throws {
        let collector = try ReportCollector()
        let root = TemporaryDirectory("reports")
        var settings = ReportSettings()
        settings.batchSize = size
        settings.maxQueuedEvents = 2000
        let queue = ReportQueue(root: root.path, url: collector.url, maxEvents: settings.maxQueuedEvents)
        let events = (0..<count).map { ReportEvent(time: Date(), device: "d", app: "app\($0)", event: .markedGood) }
        try queue.append(events)
        // One flush sends the whole queue however slow the machine: its bound is a count of
        // batches, and each request's deadline is a bound on a hang, not a speed.
        let outcome = await sender(root, settings).flush()
        #expect(outcome.delivered == count && collector.batches == expected)
        #expect(collector.events.map { $0["app"] as? String } == events.map(\.app))
        #expect(queue.pending() == 0 && queue.loadState().delivered == count)
    }

    @Test("a flush outlasting the deadline in all still sends the whole queue: the deadline bounds each request, the count of batches the flush")
    func slowButAnswering() async throws {
        let collector = try ReportCollector()
        // 12 requests of 1.5 s each: 18 s in all, each far below its 12 s deadline (a margin
        // a loaded machine keeps). A deadline for the whole flush (a busy CPU misses one the
        // same way) left a third of them queued.
        collector.mode = .slow(seconds: 1.5)
        let root = TemporaryDirectory("reports")
        var settings = ReportSettings()
        settings.batchSize = 1
        settings.deadline = .seconds(12)
        let queue = ReportQueue(root: root.path, url: collector.url, maxEvents: 100)
        let events = (0..<12).map { ReportEvent(time: Date(), device: "d", app: "app\($0)", event: .markedGood) }
        try queue.append(events)
        let outcome = await ReportSender(
            root: root.path, settings: settings, network: NetworkSettings(), clock: { Date() }, pool: BlockingPool()).flush()
        #expect(outcome.delivered == 12 && outcome.failed.isEmpty, "\(outcome)")
        #expect(collector.events.map { $0["app"] as? String } == events.map(\.app) && queue.pending() == 0)
    }

    @Test("a full queue drops its oldest events and counts them")
    func bound() async throws {
        let collector = try ReportCollector()
        let root = TemporaryDirectory("reports")
        var settings = ReportSettings()
        settings.maxQueuedEvents = 5
        let queue = ReportQueue(root: root.path, url: collector.url, maxEvents: 5)
        let events = (0..<8).map { ReportEvent(time: Date(), device: "d", app: "app\($0)", event: .markedBad) }
        for event in events { try queue.append([event]) }
        #expect(queue.pending() == 5 && queue.loadState().dropped == 3)
        await sender(root, settings).flush()
        #expect(collector.events.map { $0["id"] as? String } == events.suffix(5).map(\.id))
    }

    @Test("a stalled collector costs a sync at most the report deadline; the event stays queued and the queue backs off")
    func stalled() async throws {
        let collector = try ReportCollector()
        collector.mode = .stall(seconds: 600)
        let h = try harness(collector)
        h.configuration.reporting.deadline = .seconds(3)
        let started = ContinuousClock.now
        try await h.install("1.0.0")
        #expect(ContinuousClock.now - started < .seconds(240))  // generous (loaded CI): the stall is 600 s
        #expect(h.activeMatches("1.0.0"))
        let queue = try #require(ReportQueue.all(root: h.root.path, maxEvents: 1000).first)
        #expect(queue.pending() == 1 && queue.loadState().failures == 1 && queue.loadState().nextAttempt != nil)
        // Backing off: the next sync does not ask the collector again.
        collector.mode = .accept
        let posts = collector.posts
        #expect(await h.sync().result == .upToDate)
        #expect(collector.posts == posts && collector.events.isEmpty && queue.pending() == 1)
    }

    @Test("a collector that refuses connections: the sync succeeds, the event waits")
    func down() async throws {
        // A port that stays bound and never listens: a stopped collector's freed port could
        // be taken by another test's server meanwhile, which would answer.
        let h = try SyncHarness()
        h.configuration.report = URL(string: "http://127.0.0.1:\(try TrickleServer.deadPort())/report")!
        h.configuration.reporting.deadline = .seconds(60)
        try await h.install("1.0.0")
        let queue = try #require(ReportQueue.all(root: h.root.path, maxEvents: 1000).first)
        #expect(queue.pending() == 1 && queue.loadState().failures == 1)
    }

    @Test("400: the batch is dropped and counted, later events still go out")
    func rejected() async throws {
        let collector = try ReportCollector()
        collector.mode = .reject
        let root = TemporaryDirectory("reports")
        let queue = ReportQueue(root: root.path, url: collector.url, maxEvents: 100)
        try queue.append((0..<3).map { _ in ReportEvent(time: Date(), device: "d", app: "mall", event: .markedGood) })
        let first = await sender(root, ReportSettings()).flush()
        #expect(first.rejected == 3 && queue.pending() == 0 && queue.loadState().rejected == 3)
        collector.mode = .accept
        let next = ReportEvent(time: Date(), device: "d", app: "mall", event: .markedBad)
        try queue.append([next])
        #expect(await sender(root, ReportSettings()).flush().delivered == 1)
        #expect(collector.events.map { $0["id"] as? String } == [next.id])
    }

    @Test("503 with Retry-After: kept, not asked again before it, delivered after")
    func unavailable() async throws {
        let collector = try ReportCollector()
        collector.mode = .unavailable(retryAfter: "120")
        let root = TemporaryDirectory("reports")
        let queue = ReportQueue(root: root.path, url: collector.url, maxEvents: 100)
        let event = ReportEvent(time: Date(), device: "d", app: "mall", event: .markedGood)
        try queue.append([event])
        let now = Date()
        let first = await sender(root, ReportSettings(), now: now).flush()
        #expect(first.failed == [collector.url.absoluteString] && queue.pending() == 1)
        let state = queue.loadState()
        #expect(state.failures == 1 && (state.nextAttempt ?? 0) >= now.timeIntervalSince1970 + 119)
        collector.mode = .accept
        await sender(root, ReportSettings(), now: now.addingTimeInterval(60)).flush()
        #expect(collector.posts == 1)  // backing off: not asked
        await sender(root, ReportSettings(), now: now.addingTimeInterval(121)).flush()
        #expect(collector.events.map { $0["id"] as? String } == [event.id] && queue.loadState().failures == 0)
    }

    @Test("a line a crash cut short is dropped by the next append; whole lines survive")
    func tornTail() async throws {
        let collector = try ReportCollector()
        let root = TemporaryDirectory("reports")
        let queue = ReportQueue(root: root.path, url: collector.url, maxEvents: 100)
        let first = ReportEvent(time: Date(), device: "d", app: "mall", event: .markedGood)
        try queue.append([first])
        let segment = "\(queue.directory)/queue-0.jsonl"
        let handle = try #require(FileHandle(forWritingAtPath: segment))
        handle.seekToEndOfFile()
        handle.write(Data(#"{"id":"torn","ev"#.utf8))
        try handle.close()
        let second = ReportEvent(time: Date(), device: "d", app: "mall", event: .markedBad)
        try queue.append([second])
        #expect(queue.pending() == 2)
        await sender(root, ReportSettings()).flush()
        #expect(collector.events.map { $0["id"] as? String } == [first.id, second.id])
    }

    /// A sender whose per-request deadline only bounds a hang (the collector is local and
    /// answers): no test here depends on how fast the machine is.
    private func sender(_ root: TemporaryDirectory, _ settings: ReportSettings, now: Date = Date()) -> ReportSender {
        var settings = settings
        settings.deadline = .seconds(600)
        return ReportSender(
            root: root.path, settings: settings, network: NetworkSettings(), clock: { now }, pool: BlockingPool())
    }
}
