import Foundation
import Testing
@testable import OfflineAgent
import TestSupport

/// The version lifecycle in the library: trial installs, confirmation, rollback of bad
/// versions (by report, by launch count, by command), bad versions never reinstalled,
/// holds and history — against real syncs from a loopback origin.
@Suite("Lifecycle")
struct LifecycleTests {
    static func v(_ text: String) -> Version { Version(text)! }

    // MARK: - The record's transitions (pure)

    /// (launches already counted, limit, expected decision)
    static let launchTable: [(Int, Int, VersionLifecycle.LaunchDecision)] = [
        (0, 3, .counted(1)), (2, 3, .counted(3)), (3, 3, .rollBack), (5, 3, .rollBack),
        (0, 1, .counted(1)), (1, 1, .rollBack), (0, 0, .counted(1)), (50, 0, .counted(51)),
    ]

    @Test("a trial launch is counted up to the limit, then rolls back; 0 never does", arguments: launchTable)
    func launchDecisions(_ launches: Int, _ limit: Int, _ expected: VersionLifecycle.LaunchDecision) {
        var record = VersionLifecycle(legacyActive: nil)
        record.adopt(Self.v("2.0.0"), trialLaunches: 3, at: Date())
        record.launches = launches
        #expect(record.launch(Self.v("2.0.0"), limit: limit) == expected)
    }

    @Test("states derived from the record and the active version")
    func derivedStates() {
        var record = VersionLifecycle(legacyActive: Self.v("1.0.0"))
        #expect(record.state(of: Self.v("1.0.0")) == .good)
        // current names a version the record does not describe yet: a new install, on trial.
        #expect(record.state(of: Self.v("1.1.0")) == .trial)
        record.adopt(Self.v("1.1.0"), trialLaunches: 3, at: Date())
        #expect(record.state == .trial && record.version == Self.v("1.1.0"))
        #expect(record.launch(Self.v("1.1.0"), limit: 3) == .counted(1))
        #expect(record.launches(of: Self.v("1.1.0")) == 1)
        record.markBad(Self.v("1.1.0"), target: Self.v("1.0.0"), event: .markBad, reason: "broken", at: Date())
        #expect(record.state(of: Self.v("1.1.0")) == .bad)
        // Back on a confirmed version: good again, launches not counted.
        #expect(record.state(of: Self.v("1.0.0")) == .good)
        #expect(record.launch(Self.v("1.0.0"), limit: 3) == .confirmed)
        #expect(record.launch(Self.v("1.1.0"), limit: 3) == .bad)
        // A bad version is never adopted again, even if current names it.
        record.adopt(Self.v("1.1.0"), trialLaunches: 3, at: Date())
        #expect(record.version == Self.v("1.0.0"))
        #expect(record.history.map(\.event) == [.install, .markBad])
        #expect(record.history.last?.from == Self.v("1.1.0") && record.history.last?.to == Self.v("1.0.0"))
    }

    @Test("history and bad set are bounded")
    func bounded() {
        var record = VersionLifecycle(legacyActive: nil)
        for i in 0..<(VersionLifecycle.historyLimit + 30) {
            _ = record.setHeld(i % 2 == 0, active: nil, at: Date())
        }
        #expect(record.history.count == VersionLifecycle.historyLimit)
        for i in 0..<(VersionLifecycle.badLimit + 5) {
            record.markBad(Self.v("1.\(i)"), target: nil, event: .markBad, reason: "x", at: Date())
        }
        #expect(record.bad.count == VersionLifecycle.badLimit)
        record.markBad(Self.v("9.0"), target: nil, event: .markBad, reason: "two\nlines" + String(repeating: "x", count: 10_000), at: Date())
        #expect(record.bad.last?.reason.count == VersionLifecycle.reasonLimit)
        #expect(record.bad.last?.reason.hasPrefix("two lines") == true)
        #expect(record.isBad(Self.v("1.\(VersionLifecycle.badLimit + 4)")))
    }

    // MARK: - With real syncs

    static func harness(maxTrialLaunches: Int = 3) throws -> SyncHarness {
        let h = try SyncHarness()
        h.configuration.maxTrialLaunches = maxTrialLaunches
        return h
    }

    @Test("a new install is on trial; markGood confirms it and launches stop counting")
    func confirm() async throws {
        let h = try Self.harness()
        try await h.install("1.0.0")
        let agent = h.agent()
        var status = await agent.lifecycle(app: "mall")
        #expect(status.state == .trial && status.launches == 0 && status.maxTrialLaunches == 3)
        #expect(try await agent.recordLaunch(app: "mall") == .counted(launches: 1, limit: 3))
        #expect(try await agent.recordLaunch(app: "mall") == .counted(launches: 2, limit: 3))
        #expect(try await agent.markGood(app: "mall") == Self.v("1.0.0"))
        status = await agent.lifecycle(app: "mall")
        #expect(status.state == .good && status.launches == 0)
        for _ in 0..<5 { #expect(try await agent.recordLaunch(app: "mall") == .confirmed) }
        #expect(h.activeMatches("1.0.0"))
        #expect(status.history.map(\.event) == [.install, .confirm])
    }

    @Test("markBad rolls back to the previous version at once; the bad one is never reinstalled, a newer one is")
    func markBadRollsBack() async throws {
        let h = try Self.harness()
        try await h.install("1.0.0")
        try await h.agent().markGood(app: "mall")
        h.origin.setManifest(try h.patch(from: "1.0.0", to: "1.1.0"))
        #expect(await h.sync().result == .updated)
        let transition = try await h.agent().markBad(app: "mall", reason: "checkout button dead")
        #expect(transition == LifecycleTransition(app: "mall", from: Self.v("1.1.0"), to: Self.v("1.0.0"), switched: true))
        #expect(h.activeMatches("1.0.0"))
        #expect(try await h.served("index.html") == h.expected("1.0.0", "index.html"))
        let status = await h.agent().lifecycle(app: "mall")
        #expect(status.state == .good)
        #expect(status.badVersions.map(\.version) == [Self.v("1.1.0")])
        #expect(status.badVersions.first?.reason == "checkout button dead")

        // The same offer again: nothing downloaded, the reason reported.
        let before = h.origin.requests.count
        let refused = await h.sync()
        #expect(refused.result == .knownBad)
        #expect(refused.error == nil && refused.bytesDownloaded == 0)
        #expect(h.origin.requests.count == before + 1)  // the manifest only
        #expect(h.activeMatches("1.0.0"))

        h.origin.setManifest(try h.patch(from: "1.0.0", to: "1.2.0"))
        let newer = await h.sync()
        #expect(newer.result == .updated && newer.version == Self.v("1.2.0"))
        #expect(h.activeMatches("1.2.0"))
        #expect(await h.agent().lifecycle(app: "mall").state == .trial)
    }

    @Test("mark-bad of the first version: nothing served offline, resolve answers network")
    func markBadWithoutPrevious() async throws {
        let h = try Self.harness()
        try await h.install("1.0.0")
        let transition = try await h.agent().markBad(app: "mall")
        #expect(transition.to == nil)
        let resolution = try await h.agent().resolve(URL(string: SyncHarness.whitelist + "index.html")!, deviceID: "device")
        #expect(resolution == .network(.badVersion, app: "mall"))
        #expect(try await h.agent().status(app: "mall").first?.usable == false)
        #expect(await h.agent().lifecycle(app: "mall").state == .bad)
        #expect(await h.sync().result == .knownBad)
        // Marking it again, or confirming it, is refused with the cause.
        await #expect { try await h.agent().markBad(app: "mall") } throws: { ($0 as? OfflineAgentError)?.cause == .stateInvalid }
        await #expect { try await h.agent().markGood(app: "mall") } throws: { ($0 as? OfflineAgentError)?.cause == .stateInvalid }
        h.origin.setManifest(try h.patch(from: "1.0.0", to: "1.1.0"))
        #expect(await h.sync().result == .updated)
        #expect(try await h.served("index.html") == h.expected("1.1.0", "index.html"))
    }

    @Test("a trial version out of launches rolls back before the next launch", arguments: [1, 2, 3])
    func automaticRollback(_ limit: Int) async throws {
        let h = try Self.harness(maxTrialLaunches: limit)
        try await h.install("1.0.0")
        try await h.agent().markGood(app: "mall")
        h.origin.setManifest(h.full("1.1.0"))
        #expect(await h.sync().result == .updated)
        let agent = h.agent()
        for n in 1...limit {
            #expect(try await agent.recordLaunch(app: "mall") == .counted(launches: n, limit: limit))
            #expect(h.activeMatches("1.1.0"))
        }
        let outcome = try await agent.recordLaunch(app: "mall")
        #expect(outcome == .rolledBack(LifecycleTransition(app: "mall", from: Self.v("1.1.0"), to: Self.v("1.0.0"), switched: true)))
        #expect(h.activeMatches("1.0.0"))
        let status = await agent.lifecycle(app: "mall")
        #expect(status.history.last?.event == .automaticRollback)
        #expect(status.badVersions.first?.reason.contains("not confirmed after \(limit) launch") == true)
        #expect(await h.sync().result == .knownBad)
    }

    @Test("maxTrialLaunches 0 turns trials off: the version is good at once and never rolled back automatically")
    func noAutomaticRollback() async throws {
        let h = try Self.harness(maxTrialLaunches: 0)
        try await h.install("1.0.0")
        h.origin.setManifest(h.full("1.1.0", ["trialLaunches": 3]))
        #expect(await h.sync().result == .updated)
        #expect(await h.agent().lifecycle(app: "mall").state == .good)
        for _ in 1...10 { #expect(try await h.agent().recordLaunch(app: "mall") == .confirmed) }
        #expect(h.activeMatches("1.1.0"))
    }

    @Test("hold keeps the version (held, nothing downloaded); unhold lets the next sync update")
    func hold() async throws {
        let h = try Self.harness()
        try await h.install("1.0.0")
        try await h.agent().hold(app: "mall")
        #expect(await h.agent().lifecycle(app: "mall").held)
        h.origin.setManifest(h.full("1.1.0"))
        let held = await h.sync()
        #expect(held.result == .held && held.bytesDownloaded == 0 && held.error == nil)
        #expect(h.origin.requests(for: "/files/1.1.0.zip").isEmpty)
        #expect(h.activeMatches("1.0.0"))
        try await h.agent().unhold(app: "mall")
        #expect(await h.sync().result == .updated)
        #expect(h.activeMatches("1.1.0"))
        #expect(await h.agent().lifecycle(app: "mall").history.map(\.event) == [.install, .hold, .unhold, .install])
    }

    @Test("rollback marks the version it leaves bad, so the next sync does not undo it")
    func rollbackMarksBad() async throws {
        let h = try Self.harness()
        try await h.install("1.0.0")
        h.origin.setManifest(h.full("1.1.0"))
        #expect(await h.sync().result == .updated)
        let (from, to) = try await h.agent().rollback(app: "mall")
        #expect(from == Self.v("1.1.0") && to == Self.v("1.0.0"))
        #expect(await h.sync().result == .knownBad)
        #expect(h.activeMatches("1.0.0"))
        // Nothing further back: refused with the cause, nothing changed.
        await #expect { try await h.agent().rollback(app: "mall") } throws: { ($0 as? OfflineAgentError)?.cause == .stateInvalid }
        #expect(h.activeMatches("1.0.0"))
    }

    @Test("mark-bad during a sync: not served at once, the switch completes at the next launch")
    func markBadWhileBusy() async throws {
        let h = try Self.harness()
        try await h.install("1.0.0")
        h.origin.setManifest(h.full("1.1.0"))
        #expect(await h.sync().result == .updated)
        var transition: LifecycleTransition?
        do {
            let lock = try RootLock(root: h.store.root)
            transition = try await h.agent().markBad(app: "mall")
            withExtendedLifetime(lock) {}
        }
        #expect(transition?.switched == false && transition?.to == Self.v("1.0.0"))
        #expect(h.store.active("mall")?.version == Self.v("1.1.0"))
        #expect(try await h.agent().resolve(URL(string: SyncHarness.whitelist)!, deviceID: "d") == .network(.badVersion, app: "mall"))
        // The next launch finishes the switch and counts against the version switched to.
        let outcome = try await h.agent().recordLaunch(app: "mall")
        #expect(outcome == .counted(launches: 1, limit: 3))
        #expect(h.activeMatches("1.0.0"))
    }

    @Test("a root from before the lifecycle keeps its version good; an unreadable record is set aside")
    func legacyAndCorrupt() async throws {
        let h = try Self.harness()
        try await h.install("1.0.0")
        let path = Lifecycle(store: h.store).recordPath("mall")
        FileSystem.remove(path)
        #expect(await h.agent().lifecycle(app: "mall").state == .good)
        #expect(try await h.agent().recordLaunch(app: "mall") == .confirmed)
        try Data("{not json".utf8).write(to: URL(fileURLWithPath: path))
        #expect(try await h.agent().recordLaunch(app: "mall") == .confirmed)
        let names = try FileManager.default.contentsOfDirectory(atPath: h.store.appDirectory("mall"))
        #expect(names.contains { $0.hasPrefix("lifecycle.json.corrupt-") }, "\(names)")
    }
}
