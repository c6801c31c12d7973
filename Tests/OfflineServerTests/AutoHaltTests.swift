import Foundation
import OfflineAgent
import OfflinePublish
import OfflineServer
import TestSupport
import Testing

/// `offline-server --auto-halt` on real HTTP: reports that must never trip a rule (devices
/// outside the stage, duplicates, other versions, other apps, one device repeating
/// itself), the report that trips it, the halted manifest re-signed on disk and read by
/// an agent, `/stats`, the gauge, `history`, and a resume that starts the count afresh.
@Suite("Auto-halt")
struct AutoHaltTests {
    typealias C = FleetReportClient

    /// `count` device ids whose bucket for `fleet` is within `stage` (`inStage`) or above it.
    static func devices(_ prefix: String, inStage: Bool, stage: Int, count: Int) -> [String] {
        var ids: [String] = []
        // Bounded: about half of all ids fall on either side of a stage of 40.
        for index in 0..<10_000 where ids.count < count {
            let id = "\(prefix)-\(index)"
            if (Resolver.rolloutBucket(deviceID: id, app: "fleet") <= stage) == inStage { ids.append(id) }
        }
        return ids
    }

    /// `fleet` 1.0.0 at 100 %, then 2.0.0 staged at `stage` %, signed, published now.
    static func publishStaged(_ dir: String, key: SigningKey, stage: Int) throws {
        for (version, source, staged) in [("1.0.0", "1.0.0", nil), ("2.0.0", "1.1.0", stage)] as [(String, String, Int?)] {
            var options = PublishOptions(
                app: "fleet", version: Version(version)!, sourceDirectory: PublishFixtures.sampleApp(source),
                publishDirectory: dir, whitelist: ["https://h5.example.com/fleet/"], signingKey: key)
            options.stage = staged
            _ = try Publisher.publish(options)
        }
    }

    static func state(_ dir: String) throws -> PublishState {
        try #require(try PublishState.load(appDirectory: dir + "/fleet"))
    }

    @Test("lying, duplicate and off-target reports never trip; the tripping one halts, re-signed; stage resumes")
    func haltsAndResumes() async throws {
        let dir = try PublishFixtures.temporaryDirectory("auto-halt")
        defer { PublishFixtures.cleanUp(dir) }
        let key = SigningKey.generate()
        try Self.publishStaged(dir, key: key, stage: 40)
        var configuration = ReferenceServer.Configuration(directory: dir, port: 0, signingKey: key, reportsDatabase: dir + "/reports.sqlite")
        configuration.autoHalt = try AutoHaltRules(parsing: "failure-rate>25%,min-devices=8,window=1h")
        let server = try await ReferenceServer(configuration: configuration).start()
        defer { Task { await server.stop() } }
        let base = server.baseURL
        let inside = Self.devices("in", inStage: true, stage: 40, count: 20)
        let outside = Self.devices("out", inStage: false, stage: 40, count: 20)

        // Never trips: 20 devices outside the stage all claim 2.0.0 failed.
        let lies = outside.map { C.event("failed", device: $0, version: "2.0.0", ["errorCode": "hash-mismatch"]) }
        #expect(try await C.post(base, try C.body(lies)).receipt?.accepted == 20)
        // One device in the stage: the same failure 20 times (one id), then 20 ids more.
        let repeated = C.event("failed", device: inside[0], version: "2.0.0", ["errorCode": "network"])
        #expect(try await C.post(base, try C.body(Array(repeating: repeated, count: 20))).receipt?.duplicates == 19)
        let again = (0..<20).map { _ in C.event("failed", device: inside[0], version: "2.0.0", ["errorCode": "network"]) }
        #expect(try await C.post(base, try C.body(again)).receipt?.accepted == 20)
        // Other versions and another app, from devices in the stage.
        let offTarget = inside[1...9].flatMap { device in
            [C.event("failed", device: device, version: "1.0.0"), C.event("failed", device: device, version: "2.1.0"),
             C.event("failed", app: "elsewhere", device: device, version: "2.0.0")]
        }
        #expect(try await C.post(base, try C.body(offTarget)).receipt?.accepted == 27)
        // Seven installs in the stage: 8 devices tried, 1 failed = 12.5 %, under 25 %.
        let installs = inside[1...7].map { C.event("updated", device: $0, version: "2.0.0", ["via": "full"]) }
        let installBody = try C.body(installs)
        #expect(try await C.post(base, installBody).receipt?.accepted == 7)
        // The same batch again (a lost answer): all duplicates, nothing counted twice.
        #expect(try await C.post(base, installBody).receipt?.duplicates == 7)
        #expect(try Self.state(dir).stage == 40)
        var stats = try await C.stats(base)
        #expect(C.version(stats, "2.0.0")?["halted"] as? Bool == false)
        #expect(C.version(stats, "2.0.0")?["stage"] as? Int == 40)
        #expect(try await C.metrics(base).value("offline_server_rollout_halted", ["app": "fleet", "version": "2.0.0"]) == 0)

        // Trips: three more devices in the stage fail, with clocks far off (the window is
        // the server's receipt time): 4 of 11 = 36 %.
        let tripping = inside[10...12].map {
            C.event("failed", device: $0, version: "2.0.0", ["errorCode": "hash-mismatch", "time": "2099-01-01T00:00:00Z"])
        }
        #expect(try await C.post(base, try C.body(tripping)).receipt?.accepted == 3)
        // The halt is written before the batch is answered.
        let halted = try Self.state(dir)
        #expect(halted.stage == 0)
        let revision = try #require(halted.revisions?.last)
        #expect(revision.verb == "auto-halt")
        #expect(revision.version == Version("2.0.0"))
        #expect(revision.reason.contains("failure-rate>25%: 4 of 11 devices in the stage failed (36.4%)"), "\(revision.reason)")
        #expect(try ReleaseEditor.history(app: "fleet", publishDirectory: dir).text.contains("auto-halt  2.0.0  stage 40% -> 0% (halted)"))

        stats = try await C.stats(base)
        let v2 = try #require(C.version(stats, "2.0.0"))
        #expect(v2["halted"] as? Bool == true)
        #expect(v2["stage"] as? Int == 0)
        #expect((v2["reason"] as? String)?.contains("failure-rate>25%") == true)
        #expect(try await C.metrics(base).value("offline_server_rollout_halted", ["app": "fleet", "version": "2.0.0"]) == 1)

        // An agent in the stage, trusting the key, reads the re-signed static manifest and the
        // server's answer: both halted, so it keeps what it has.
        for url in [base + "/fleet/manifest.json", base + "/manifest"] {
            var options = SyncOptions(force: true, publicKey: key.publicKeyBase64)
            options.deviceID = inside[15]
            let root = URL(fileURLWithPath: dir + "/agent-\(url.hasSuffix("json") ? "static" : "dynamic")")
            let sync = await Agent(root: root, configuration: SyncHarness.hangBounds()).sync(app: "fleet", manifest: URL(string: url)!, options: options)
            #expect(sync.result == .notInStage, "\(url): \(String(describing: sync.error))")
        }

        // Resumed by hand: the count starts afresh, so the old failures do not halt it again.
        try ReleaseEditor.stage(app: "fleet", publishDirectory: dir, percent: 40, key: key, now: Date().addingTimeInterval(1))
        try await Task.sleep(for: .milliseconds(1100))
        let after = [C.event("failed", device: inside[16], version: "2.0.0")]
        #expect(try await C.post(base, try C.body(after)).receipt?.accepted == 1)
        #expect(try Self.state(dir).stage == 40)
        stats = try await C.stats(base)
        #expect(C.version(stats, "2.0.0")?["halted"] as? Bool == false)
        #expect(C.version(stats, "2.0.0")?["reason"] is NSNull)
        #expect(try await C.metrics(base).value("offline_server_rollout_halted", ["app": "fleet", "version": "2.0.0"]) == 0)
    }

    @Test("a server without the manifest's key does not halt, says why in the log, and keeps serving")
    func wrongKeyDoesNotHalt() async throws {
        let dir = try PublishFixtures.temporaryDirectory("auto-halt-key")
        defer { PublishFixtures.cleanUp(dir) }
        try Self.publishStaged(dir, key: SigningKey.generate(), stage: 50)
        var configuration = ReferenceServer.Configuration(
            directory: dir, port: 0, signingKey: SigningKey.generate(), reportsDatabase: dir + "/reports.sqlite")
        configuration.autoHalt = try AutoHaltRules(parsing: "failure-rate>0%,min-devices=1")
        let server = try await ReferenceServer(configuration: configuration).start()
        defer { Task { await server.stop() } }
        let device = Self.devices("k", inStage: true, stage: 50, count: 1)[0]
        let answer = try await C.post(server.baseURL, try C.body([C.event("failed", device: device, version: "2.0.0")]))
        #expect(answer.receipt?.accepted == 1)
        #expect(try Self.state(dir).stage == 50)
        #expect(try Self.state(dir).revisions?.last?.verb == "publish")
    }

    @Test("min-devices scales with the devices expected in the stage: a 5 % canary of 40 devices is judged")
    func minimumScales() throws {
        let rules = try AutoHaltRules(parsing: "failure-rate>5%")
        #expect(rules.minDevices == 20)
        // max(1, min(N, ceil(D × S / 200))): half the devices a stage of S % of D is expected to hold.
        #expect(rules.minimum(knownDevices: 40, stage: 5) == 1)
        #expect(rules.minimum(knownDevices: 400, stage: 5) == 10)
        #expect(rules.minimum(knownDevices: 800, stage: 5) == 20)
        #expect(rules.minimum(knownDevices: 1_000_000, stage: 50) == 20)
        #expect(rules.minimum(knownDevices: 0, stage: 10) == 1)
        #expect(rules.minimum(knownDevices: Int64.max, stage: 100) == 20, "no overflow")
        #expect(try AutoHaltRules(parsing: "failure-rate>5%,min-devices=3").minimum(knownDevices: 1000, stage: 10) == 3)
    }

    @Test("rules: the issue's example, each key once, rates in 0…100 %, windows in s/m/h/d")
    func parsesRules() throws {
        let rules = try AutoHaltRules(parsing: "failure-rate>5%,rollback-rate>2%,min-devices=20,window=1h")
        #expect(rules == AutoHaltRules(failureRate: 5, rollbackRate: 2, minDevices: 20, windowSeconds: 3600))
        #expect(try AutoHaltRules(parsing: "rollback-rate>0.5%").minDevices == 20)
        #expect(try AutoHaltRules(parsing: "failure-rate>10%,window=2d").windowSeconds == 172_800)
        for bad in ["", "min-devices=5", "failure-rate>5", "failure-rate>101%", "failure-rate>-1%", "failure-rate=5%",
                    "failure-rate>5%,failure-rate>6%", "failure-rate>5%,window=0h", "failure-rate>5%,window=1w",
                    "failure-rate>5%,min-devices=0", "failure-rate<5%", "failure-rate>5%,colour=red", "failure-rate>nan%"] {
            #expect(throws: ServerError.self, "\(bad)") { try AutoHaltRules(parsing: bad) }
        }
    }
}
