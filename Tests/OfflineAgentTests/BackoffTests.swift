import Foundation
import Synchronization
import Testing
@testable import OfflineAgent
import TestSupport

/// Consecutive failed checks wait 5 min × 2^(n−1), at most 6 h, ±10 %; a success resets
/// the count, `--force` checks anyway, `status` shows the next check and the count.
@Suite("Failure backoff")
struct BackoffTests {
    static let now = Date(timeIntervalSince1970: 1_900_000_000)

    struct Row: CustomTestStringConvertible, Sendable {
        var failures: Int
        var spread: Double
        var delay: TimeInterval
        var testDescription: String { "\(failures) failures, spread \(spread)" }
    }

    static let rows: [Row] = [
        Row(failures: 1, spread: 0, delay: 300),
        Row(failures: 2, spread: 0, delay: 600),
        Row(failures: 3, spread: 1, delay: 1320),
        Row(failures: 4, spread: -1, delay: 2160),
        Row(failures: 7, spread: 0, delay: 19_200),
        Row(failures: 8, spread: 0, delay: 21_600),
        Row(failures: 9, spread: 1, delay: 23_760),
        Row(failures: 10_000, spread: -1, delay: 19_440),
    ]

    @Test("the wait doubles per failure, capped at 6 h, jitter ±10 %", arguments: rows)
    func delay(_ row: Row) {
        #expect(abs(Backoff().delay(failures: row.failures, spread: row.spread) - row.delay) < 0.001)
    }

    @Test("consecutive failed syncs of an installed app wait longer each time; a success resets the count")
    func progression() async throws {
        let h = try SyncHarness()
        let clock = ClockSkewTests.FakeClock(Self.now.addingTimeInterval(-3600))
        h.configuration.clock = { clock.now }
        try await h.install("1.0.0")
        h.origin.setManifestReply { _ in .status(500) }
        var at = Self.now
        for n in 1...4 {
            clock.set(at)
            let failed = await h.sync(force: false)
            #expect(failed.result == .failed)
            let base = 300 * pow(2, Double(n - 1))
            let wait = try #require(failed.nextCheck).timeIntervalSince(at)
            // The 5-minute throttle holds too: the first wait is at least 300 s.
            #expect(wait >= max(base * 0.9, 300) && wait <= max(base * 1.1, 300), "failure \(n): waits \(wait)")
            #expect(try await h.agent().status(app: "mall").first?.failures == n)
            // Before the wait is over nothing is asked.
            clock.set(at.addingTimeInterval(wait - 1))
            let throttled = await h.sync(force: false)
            #expect(throttled.result == .throttled)
            // The first wait may be the 5-minute interval's (the backoff's is 300 s ±10 %).
            let reasons = ["\(n) failed check\(n == 1 ? "" : "s") in a row, backing off"] + (n == 1 ? ["checked less than 5 minutes ago"] : [])
            #expect(reasons.contains(throttled.throttleReason ?? ""), "\(throttled.throttleReason ?? "")")
            #expect(h.origin.requests(for: "/manifest").count == n + 1)
            at = at.addingTimeInterval(wait + 1)
        }
        h.origin.setManifest(h.full("1.1.0"))
        clock.set(at)
        #expect(await h.sync(force: false).result == .updated)
        let status = try #require(try await h.agent().status(app: "mall").first)
        #expect(status.failures == 0)
        // After a success only the 5-minute throttle holds.
        // (lastCheck is stored to the second.)
        #expect(abs((status.nextCheck ?? .distantPast).timeIntervalSince(at.addingTimeInterval(300))) <= 1)
    }

    /// Issue 39, surprise 7: a kiosk that boots before its network has nothing to serve
    /// meanwhile; doubling its wait (44 minutes after four failures) only delays its first install.
    @Test("with nothing installed, every failed check waits 5 minutes ±10 %, however many failed before")
    func nothingInstalled() async throws {
        let h = try SyncHarness()
        let clock = ClockSkewTests.FakeClock(Self.now)
        h.configuration.clock = { clock.now }
        h.origin.setManifestReply { _ in .status(500) }
        var at = Self.now
        for n in 1...6 {
            clock.set(at)
            let failed = await h.sync(force: false)
            #expect(failed.result == .failed)
            let wait = try #require(failed.nextCheck).timeIntervalSince(at)
            #expect(wait >= 300 && wait <= 330, "failure \(n): waits \(wait)")
            #expect(try await h.agent().status(app: "mall").first?.failures == n)
            at = at.addingTimeInterval(wait + 1)
        }
    }

    @Test("--force checks during a backoff (and a failure still counts)")
    func forceOverBackoff() async throws {
        let h = try SyncHarness()
        h.configuration.clock = { Self.now }
        h.origin.setManifestReply { _ in .status(500) }
        #expect(await h.sync(force: false).result == .failed)
        #expect(await h.sync(force: false).result == .throttled)
        #expect(await h.sync(force: true).result == .failed)
        #expect(h.origin.requests(for: "/manifest").count == 2)
        #expect(try await h.agent().status(app: "mall").first?.failures == 2)
    }

    @Test("a backoff written by a clock years fast does not hold")
    func wrongClockBackoff() async throws {
        let h = try SyncHarness()
        let clock = ClockSkewTests.FakeClock(Self.now.addingTimeInterval(5 * 365 * 86_400))
        h.configuration.clock = { clock.now }
        h.origin.setManifestReply { _ in .status(500) }
        #expect(await h.sync(force: false).result == .failed)
        clock.set(Self.now)
        h.origin.setManifest(h.full("1.0.0"))
        #expect(await h.sync(force: false).result == .updated)
    }

    @Test("status prints the next check and the failure count")
    func statusLine() async throws {
        let h = try SyncHarness()
        h.origin.setManifestReply { _ in .status(500) }
        #expect(await h.sync(force: false).result == .failed)
        let result = try await CLI.run(["status", "--root", h.root.path])
        #expect(result.stdout.contains("next check: "), "\(result.stdout)")
        #expect(result.stdout.contains("(1 failed checks in a row)"), "\(result.stdout)")
    }
}
