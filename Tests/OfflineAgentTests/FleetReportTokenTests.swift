import Foundation
import OfflineAgent
import Testing
import TestSupport

/// The collector's bearer token (`offline-server --report-token`, `reportToken` on the
/// device): recorded per collector with its queue by the sync that knows it, sent with
/// every POST of that queue and to no other host.
@Suite("Fleet reports: bearer token")
struct FleetReportTokenTests {
    static let token = "s3cret-T0ken_for.the~collector"

    private func harness(_ collector: ReportCollector, token: String?) throws -> SyncHarness {
        let h = try SyncHarness()
        h.configuration.report = collector.url
        h.configuration.reportToken = token
        h.configuration.reporting.deadline = .seconds(60)  // generous: two shared cores
        return h
    }

    private func queue(_ h: SyncHarness, _ collector: ReportCollector) -> ReportQueue {
        ReportQueue(root: h.root.path, url: collector.url, maxEvents: 1000)
    }

    @Test("the token goes with every POST, is recorded 0600 for later lifecycle reports, and a sync without one removes it")
    func recorded() async throws {
        let collector = try ReportCollector()
        collector.token = Self.token
        let h = try harness(collector, token: Self.token)
        try await h.install("1.0.0")
        #expect(await collector.waitForEvents(1))
        let queue = queue(h, collector)
        let path = "\(queue.directory)/token"
        #expect(try String(contentsOfFile: path, encoding: .utf8) == Self.token)
        let mode = try #require(try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int)
        #expect(mode & 0o777 == 0o600)
        // A transition knows no token: its flush (here a bare sender, as serve's) sends the recorded one.
        try await h.agent().markGood(app: "mall")
        let flush = await ReportSender(root: h.root.path, settings: ReportSettings(), network: NetworkSettings(), clock: { Date() },
                                       pool: BlockingPool()).flush()
        #expect(flush.delivered == 1, "\(flush)")
        #expect(collector.events.map { $0["event"] as? String } == ["updated", "marked-good"])
        #expect(collector.authorizations == [String?](repeating: "Bearer \(Self.token)", count: collector.posts))
        // A collector that enrols nobody (404) was asked once, not at every flush: the token goes on.
        #expect(collector.otherPosts == 1 && queue.enrolmentRefusedRecently(now: Date()))
        #expect(queue.credential() == nil)
        // The configuration's token is for the configuration's collector: a sync naming another sends it none.
        let other = try ReportCollector()
        h.origin.setManifest(h.full("1.1.0"))
        let updated = await h.agent().sync(app: "mall", manifest: h.origin.manifestURL, options: SyncOptions(force: true, report: other.url))
        #expect(updated.result == .updated)
        #expect(other.events.map { $0["event"] as? String } == ["updated"] && other.authorizations == [nil])
        #expect(ReportQueue(root: h.root.path, url: other.url, maxEvents: 1000).token() == nil)
        // A sync reporting to the collector without a token removes the recorded one.
        h.configuration.report = collector.url
        h.configuration.reportToken = nil
        _ = await h.sync(force: false)
        #expect(!FileSystem.exists(path) && queue.token() == nil)
    }

    @Test("401 for a wrong or missing token: nothing lost, backed off; the right token lifts the backoff and delivers",
          arguments: [String?.none, "wrong"])
    func refused(_ given: String?) async throws {
        let collector = try ReportCollector()
        collector.token = Self.token
        let h = try harness(collector, token: given)
        try await h.install("1.0.0")
        let queue = queue(h, collector)
        let state = queue.loadState()
        #expect(queue.pending() == 1 && state.failures == 1 && state.nextAttempt != nil && collector.events.isEmpty)
        #expect(collector.authorizations == [given.map { "Bearer \($0)" }])
        // Backing off: an unchanged config does not ask again.
        #expect(await h.sync(force: false).result == .throttled)
        #expect(collector.posts == 1 && queue.pending() == 1)
        // Fixed: even a throttled run records the token and sends the queue at once.
        h.configuration.reportToken = Self.token
        #expect(await h.sync(force: false).result == .throttled)
        #expect(collector.events.map { $0["event"] as? String } == ["updated"] && queue.pending() == 0)
        #expect(queue.loadState().failures == 0)
    }

    @Test("a redirect is not followed: the token never reaches the other host")
    func redirect() async throws {
        let elsewhere = try ReportCollector()
        let collector = try ReportCollector()
        collector.mode = .redirect(elsewhere.url)
        let root = TemporaryDirectory("reports")
        let queue = ReportQueue(root: root.path, url: collector.url, maxEvents: 100)
        try queue.remember(token: Self.token)
        try queue.append([ReportEvent(time: Date(), device: "d", app: "mall", event: .markedGood)])
        var settings = ReportSettings()
        settings.deadline = .seconds(60)
        let flush = await ReportSender(root: root.path, settings: settings, network: NetworkSettings(), clock: { Date() },
                                       pool: BlockingPool()).flush()
        #expect(flush.failed == [collector.url.absoluteString] && queue.pending() == 1)
        #expect(collector.authorizations == ["Bearer \(Self.token)"] && elsewhere.posts == 0)
    }

    @Test("an invalid token is refused, never recorded", arguments: ["", "two words", "new\nline", String(repeating: "x", count: 513), "caf\u{e9}"])
    func invalid(_ token: String) throws {
        #expect(!ReportToken.isValid(token))
        let root = TemporaryDirectory("reports")
        let queue = ReportQueue(root: root.path, url: URL(string: "http://127.0.0.1:9/report")!, maxEvents: 100)
        #expect(throws: OfflineAgentError.self) { try queue.remember(token: token) }
        #expect(queue.token() == nil)
        #expect(ReportToken.isValid(String(repeating: "x", count: 512)))
    }
}
