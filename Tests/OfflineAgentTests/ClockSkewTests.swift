import Foundation
import Synchronization
import Testing
@testable import OfflineAgent
import TestSupport

/// A clock that was wrong (years fast) when the check state was written cannot freeze
/// updates: recorded instants more than 24 h ahead are clamped, `--force` always checks.
/// Every case runs on an injected clock, never by sleeping.
@Suite("Wrong clocks and Retry-After")
struct ClockSkewTests {
    /// A settable wall clock for `AgentConfiguration.clock`.
    final class FakeClock: Sendable {
        private let value: Mutex<Date>
        init(_ date: Date) { value = Mutex(date) }
        var now: Date { value.withLock { $0 } }
        func set(_ date: Date) { value.withLock { $0 = date } }
    }

    /// Whole seconds, so instants survive the state file exactly.
    static let now = Date(timeIntervalSince1970: 1_900_000_000)
    static let day: TimeInterval = 86_400
    static let fiveYears: TimeInterval = 5 * 365 * 86_400

    // MARK: - Throttle

    struct ThrottleCase: CustomTestStringConvertible, Sendable {
        var label: String
        var lastCheck: TimeInterval?
        var notBefore: TimeInterval?
        var force = false
        /// Expected next check, as an offset from now; nil when a check may happen now.
        var next: TimeInterval?
        var testDescription: String { label }
    }

    static let throttleCases: [ThrottleCase] = [
        ThrottleCase(label: "notBefore five years ahead is clamped to 24 h", notBefore: fiveYears, next: day),
        ThrottleCase(label: "notBefore 25 h ahead is clamped to 24 h", notBefore: 25 * 3600, next: day),
        ThrottleCase(label: "notBefore and lastCheck both five years ahead", lastCheck: fiveYears, notBefore: fiveYears, next: day),
        ThrottleCase(label: "force checks over a five-year notBefore", notBefore: fiveYears, force: true, next: nil),
        ThrottleCase(label: "force checks over a legitimate notBefore", notBefore: 3600, force: true, next: nil),
    ]

    @Test("the throttle distrusts instants a wrong clock recorded", arguments: throttleCases)
    func throttle(_ row: ThrottleCase) {
        var state = CheckState()
        state.lastCheck = row.lastCheck.map { Self.now.addingTimeInterval($0) }
        state.notBefore = row.notBefore.map { Self.now.addingTimeInterval($0) }
        let next = Throttle().nextCheck(after: state, now: Self.now, force: row.force)
        #expect(next == row.next.map { Self.now.addingTimeInterval($0) })
        // Whatever was recorded, the answer is never more than 24 h away.
        #expect((next ?? Self.now) <= Self.now.addingTimeInterval(Self.day))
    }

    // MARK: - Retry-After

    struct RetryAfterCase: CustomTestStringConvertible, Sendable {
        var header: String
        /// Expected next check as an offset from now; nil when the answer must be refused.
        var next: TimeInterval?
        var testDescription: String { "Retry-After: \(header)" }
    }

    static let retryAfterCases: [RetryAfterCase] = [
        RetryAfterCase(header: "99999999999999999999999", next: day),
        RetryAfterCase(header: "Sun, 06 Nov 1994 08:49:37 GMT", next: 0),
        RetryAfterCase(header: "-5", next: nil),
        RetryAfterCase(header: "+60", next: nil),
        RetryAfterCase(header: "soon", next: nil),
    ]

    @Test("a 503's Retry-After is capped at 24 h; an unusable one fails the check", arguments: retryAfterCases)
    func retryAfter(_ row: RetryAfterCase) async throws {
        let h = try SyncHarness()
        h.configuration.clock = { Self.now }
        h.origin.setManifestReply { _ in .status(503, headers: [("Retry-After", row.header)]) }
        let report = await h.sync(force: false)
        if let next = row.next {
            #expect(report.result == .throttled, "\(report.error?.description ?? "")")
            #expect(report.nextCheck == Self.now.addingTimeInterval(next))
            #expect(h.store.checkState("mall").notBefore == Self.now.addingTimeInterval(next))
        } else {
            #expect(report.result == .failed)
            #expect(report.error?.cause == .manifestUnavailable, "\(report.error?.description ?? "no error")")
            #expect(h.store.checkState("mall").notBefore == nil)
        }
    }

    // MARK: - Whole syncs across a clock correction

    struct Skew: CustomTestStringConvertible, Sendable {
        var label: String
        /// Leaves check state behind while the clock runs at `now + offset`.
        var offset: TimeInterval
        var reply: @Sendable (ScriptedServer.Request) -> ScriptedServer.Reply
        /// After the correction, the sync at `now` is throttled until this offset.
        var heldUntil: TimeInterval
        var testDescription: String { label }
    }

    static let skews: [Skew] = [
        Skew(label: "503 Retry-After 3600 seen with the clock five years fast", offset: fiveYears,
             reply: { _ in .status(503, headers: [("Retry-After", "3600")]) }, heldUntil: day),
        Skew(label: "429 Retry-After 86400 seen with the clock 30 days fast", offset: 30 * day,
             reply: { _ in .status(429, headers: [("Retry-After", "86400")]) }, heldUntil: day),
    ]

    @Test("after the clock is corrected the agent checks again within 24 h", arguments: skews)
    func correctedClock(_ skew: Skew) async throws {
        let h = try SyncHarness()
        let clock = FakeClock(Self.now.addingTimeInterval(skew.offset))
        h.configuration.clock = { clock.now }
        h.origin.setManifestReply(skew.reply)
        _ = await h.sync(force: false)
        #expect(h.origin.requests(for: "/manifest").count == 1)

        h.origin.setManifest(h.full("1.0.0"))
        clock.set(Self.now)
        let held = skew.heldUntil
        let throttled = await h.sync(force: false)
        #expect(throttled.result == .throttled)
        #expect(throttled.nextCheck == Self.now.addingTimeInterval(held))
        // The clamp is written down: an hour later the next check has not slid.
        clock.set(Self.now.addingTimeInterval(3600))
        #expect(await h.sync(force: false).nextCheck == Self.now.addingTimeInterval(held))
        #expect(h.origin.requests(for: "/manifest").count == 1)
        clock.set(Self.now.addingTimeInterval(held + 1))
        let report = await h.sync(force: false)
        #expect(report.result == .updated, "\(report.result) \(report.error?.description ?? "")")
        #expect(h.activeMatches("1.0.0"))
    }

    @Test("--force checks over a server's Retry-After, and a served answer clears it")
    func forceOverRetryAfter() async throws {
        let h = try SyncHarness()
        h.configuration.clock = { Self.now }
        h.origin.setManifestReply { _ in .status(503, headers: [("Retry-After", "3600")]) }
        #expect(await h.sync(force: false).result == .throttled)
        #expect(await h.sync(force: false).result == .throttled)
        #expect(h.origin.requests(for: "/manifest").count == 1)
        h.origin.setManifest(h.full("1.0.0"))
        #expect(await h.sync(force: true).result == .updated)
        #expect(h.store.checkState("mall").notBefore == nil)
    }
}
