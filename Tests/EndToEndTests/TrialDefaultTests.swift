import Foundation
import Testing
@testable import OfflineAgent
import TestSupport

/// Trials are the publisher's call (issue 30): a version is on trial only when its
/// manifest asks (`trialLaunches`) or the device turns trials on; a rollback returns a
/// version in the state it had; `forget-bad` is the way out of a bad mark.
@Suite("Trials are the publisher's call", .serialized)
struct TrialDefaultTests {
    /// A harness whose device says nothing about trials: the shipped default.
    static func harness() throws -> SyncHarness {
        let h = try SyncHarness()
        h.configuration.maxTrialLaunches = nil
        return h
    }

    static func v(_ text: String) -> Version { Version(text)! }

    @Test("without a trial request an installed version is good and never rolled back, however often it opens")
    func uninstrumentedPageStays() async throws {
        let h = try Self.harness()
        try await h.install("1.0.0")
        h.origin.setManifest(try h.patch(from: "1.0.0", to: "1.1.0"))
        #expect(await h.sync().result == .updated)
        let agent = h.agent()
        #expect(await agent.lifecycle(app: "mall").state == .good)
        for _ in 0..<10 { #expect(try await agent.recordLaunch(app: "mall") == .confirmed) }
        #expect(h.activeMatches("1.1.0"))
        let status = await agent.lifecycle(app: "mall")
        #expect(status.state == .good && status.maxTrialLaunches == 0 && status.badVersions.isEmpty)
    }

    @Test("the manifest's trialLaunches puts the version on trial; without mark-good it is rolled back to a good version that stays")
    func publisherAsksForTrial() async throws {
        let h = try Self.harness()
        try await h.install("1.0.0")
        h.origin.setManifest(try h.patch(from: "1.0.0", to: "1.1.0", ["trialLaunches": 2]))
        #expect(await h.sync().result == .updated)
        let agent = h.agent()
        var status = await agent.lifecycle(app: "mall")
        #expect(status.state == .trial && status.maxTrialLaunches == 2)
        #expect(try await agent.recordLaunch(app: "mall") == .counted(launches: 1, limit: 2))
        #expect(try await agent.recordLaunch(app: "mall") == .counted(launches: 2, limit: 2))
        guard case .rolledBack(let transition) = try await agent.recordLaunch(app: "mall") else {
            Issue.record("the third launch did not roll back")
            return
        }
        #expect(transition.to == Self.v("1.0.0"))
        // The version rolled back to was good: it stays good, it is never rolled back to nothing.
        status = await agent.lifecycle(app: "mall")
        #expect(status.version == Self.v("1.0.0") && status.state == .good)
        for _ in 0..<5 { #expect(try await agent.recordLaunch(app: "mall") == .confirmed) }
        #expect(h.activeMatches("1.0.0"))
    }

    @Test("the device's setting wins: 0 turns a requested trial off, N turns trials on for a manifest that asks none")
    func deviceSettingWins() async throws {
        let off = try Self.harness()
        off.configuration.maxTrialLaunches = 0
        off.origin.setManifest(off.full("1.0.0", ["trialLaunches": 3]))
        #expect(await off.sync().result == .updated)
        #expect(await off.agent().lifecycle(app: "mall").state == .good)

        let on = try Self.harness()
        on.origin.setManifest(on.full("1.0.0"))
        var options = SyncOptions(force: true)
        options.maxTrialLaunches = 4
        #expect(await on.agent().sync(app: "mall", manifest: on.origin.manifestURL, options: options).result == .updated)
        let status = await on.agent().lifecycle(app: "mall")
        #expect(status.state == .trial && status.maxTrialLaunches == 4)
    }

    @Test("a rollback returns the version in the state it had: a trial keeps the launches it used")
    func rollbackRestoresTrial() async throws {
        let h = try Self.harness()
        h.origin.setManifest(h.full("1.0.0", ["trialLaunches": 3]))
        #expect(await h.sync().result == .updated)
        #expect(try await h.agent().recordLaunch(app: "mall") == .counted(launches: 1, limit: 3))
        h.origin.setManifest(try h.patch(from: "1.0.0", to: "1.1.0"))
        #expect(await h.sync().result == .updated)
        let back = try await h.agent().rollback(app: "mall")
        #expect(back.to == Self.v("1.0.0"))
        let status = await h.agent().lifecycle(app: "mall")
        #expect(status.state == .trial && status.launches == 1 && status.maxTrialLaunches == 3)
    }

    @Test("the issue's case: rollback by command to a good version; it is not rolled back to nothing")
    func rollbackByCommandKeepsGood() async throws {
        let h = try Self.harness()
        try await h.install("1.0.0")
        h.origin.setManifest(try h.patch(from: "1.0.0", to: "1.1.0", ["trialLaunches": 3]))
        #expect(await h.sync().result == .updated)
        let result = try await CLI.run(["rollback", "--root", h.root.path, "--app", "mall"])
        #expect(result.status == 0, "\(result.stderr)")
        for _ in 0..<6 { #expect(try await h.agent().recordLaunch(app: "mall") == .confirmed) }
        let status = await h.agent().lifecycle(app: "mall")
        #expect(status.version == Self.v("1.0.0") && status.state == .good)
        #expect(status.badVersions.map(\.version) == [Self.v("1.1.0")])
    }

    @Test("forget-bad clears one or every bad mark, is recorded in history, and lets a sync install the version again")
    func forgetBad() async throws {
        let h = try Self.harness()
        try await h.install("1.0.0")
        h.origin.setManifest(try h.patch(from: "1.0.0", to: "1.1.0"))
        #expect(await h.sync().result == .updated)
        let app = ["--root", h.root.path, "--app", "mall"]
        #expect(try await CLI.run(["mark-bad"] + app).status == 0)
        #expect(await h.sync().result == .knownBad)

        let wrong = try await CLI.run(["forget-bad"] + app + ["--version", "1.0.0"])
        #expect(wrong.status == 1 && wrong.stderr == "offline-agent: lifecycle: mall 1.0.0 is not marked bad\n", "\(wrong.stderr)")
        let badFormat = try await CLI.run(["forget-bad"] + app + ["--version", "1.1-beta"])
        #expect(badFormat.status == 64 && badFormat.stderr.contains("dotted decimal"), "\(badFormat.stderr)")

        let cleared = try await CLI.run(["forget-bad"] + app + ["--version", "1.1.0"])
        #expect(cleared.status == 0, "\(cleared.stderr)")
        #expect(cleared.stdout == "mall: bad mark cleared for 1.1.0\n")
        let history = try await CLI.run(["history"] + app)
        #expect(history.stdout.contains("forget-bad 1.0.0 -> 1.0.0: bad mark cleared: 1.1.0"), "\(history.stdout)")
        #expect(await h.agent().lifecycle(app: "mall").badVersions.isEmpty)
        #expect(await h.sync().result == .updated)
        #expect(h.activeMatches("1.1.0"))

        let none = try await CLI.run(["forget-bad"] + app)
        #expect(none.status == 1 && none.stderr == "offline-agent: lifecycle: no version of 'mall' is marked bad\n", "\(none.stderr)")
    }

    @Test("forget-bad of the active version after a rollback to nothing serves it again, as good")
    func forgetBadActive() async throws {
        let h = try Self.harness()
        try await h.install("1.0.0")
        let app = ["--root", h.root.path, "--app", "mall"]
        #expect(try await CLI.run(["mark-bad"] + app).status == 0)
        #expect(try await h.served("index.html") == nil)
        let good = try await CLI.run(["mark-good"] + app)
        #expect(good.status == 1)
        #expect(good.stderr.contains("lifecycle: mall 1.0.0 is marked bad and not used offline; it cannot be confirmed (offline-agent forget-bad --app mall --version 1.0.0 clears the mark)"), "\(good.stderr)")
        #expect(try await CLI.run(["forget-bad"] + app).status == 0)
        #expect(try await h.served("index.html") == h.expected("1.0.0", "index.html"))
        #expect(await h.agent().lifecycle(app: "mall").state == .good)
    }

    @Test("an existing root keeps working: a trial recorded before trials were opt-in keeps its limit; old records decode")
    func existingRoot() async throws {
        let h = try SyncHarness()  // trials on, as every sync did before
        try await h.install("1.0.0")
        let store = h.store
        // Records as the previous release wrote them: no `left`, no `trialLaunches`.
        let lifecycle = Lifecycle(store: store)
        var record = try #require(lifecycle.record("mall"))
        record.left = nil
        var json = try #require(String(data: try Store.encoder.encode(record), encoding: .utf8))
        json = json.replacingOccurrences(of: ",\"left\":null", with: "").replacingOccurrences(of: "\"left\":null,", with: "")
        try json.write(toFile: lifecycle.recordPath("mall"), atomically: true, encoding: .utf8)
        var installed = try #require(store.metadata("mall", Self.v("1.0.0")))
        installed.trialLaunches = nil
        try store.updateRecord(installed, app: "mall")
        let status = await h.agent().lifecycle(app: "mall")
        #expect(status.state == .trial && status.maxTrialLaunches == 3)
        #expect(try await h.agent().recordLaunch(app: "mall") == .counted(launches: 1, limit: 3))
    }

    @Test("sync --max-trial-launches and a config file's per-app maxTrialLaunches turn trials on; status says good otherwise")
    func commandLineSettings() async throws {
        let h = try Self.harness()
        h.origin.setManifest(h.full("1.0.0"))
        let sync = ["sync", "--allow-unsigned", "--root", h.root.path, "--app", "mall", "--manifest", h.origin.manifestURL.absoluteString, "--json"]
        #expect(try await CLI.run(sync).status == 0)
        let status = CLI.json(try await CLI.run(["status", "--root", h.root.path, "--app", "mall", "--json"]).stdout)
        #expect(status?["state"] as? String == "good" && status?["maxTrialLaunches"] as? Int == 0, "\(status ?? [:])")

        let c = try Self.harness()
        c.origin.setManifest(c.full("1.0.0"))
        let root = c.root.file("data"), config = c.root.file("agent.json")
        try """
            {"root": "\(root)", "allowUnsigned": true, "apps": [{"app": "mall", "manifest": "\(c.origin.manifestURL)", "maxTrialLaunches": 2}]}
            """.write(toFile: config, atomically: true, encoding: .utf8)
        #expect(try await CLI.run(["sync", "--config", config]).status == 0)
        let trial = CLI.json(try await CLI.run(["status", "--root", root, "--app", "mall", "--json"]).stdout)
        #expect(trial?["state"] as? String == "trial" && trial?["maxTrialLaunches"] as? Int == 2, "\(trial ?? [:])")
    }
}
