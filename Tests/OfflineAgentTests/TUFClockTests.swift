import Foundation
import Testing
@testable import OfflineAgent
import OfflinePublish
import TestSupport

/// Clocks against TUF expiry (docs/OPERATIONS.md, "Clocks"), on the agent's injected
/// clock with a real publish directory behind a real `offline-server`: a clock six
/// months fast calls the repository's fresh metadata expired (`metadata-expired`) and
/// keeps its version serving, then updates once it is right; a device that was off for
/// six months (its trusted timestamp long expired) updates once the repository's
/// timestamp is fresh.
@Suite("TUF and wrong clocks")
struct TUFClockTests {
    typealias F = PublishFixtures

    typealias FakeClock = ClockSkewTests.FakeClock

    static let sixMonths: TimeInterval = 182 * 86_400

    static func publish(_ version: String, out: String, key: SigningKey, at now: Date) throws {
        var options = PublishOptions(
            app: "mall", version: Version(version)!, sourceDirectory: F.sampleApp(version), publishDirectory: out,
            whitelist: ["https://h5.example.com/mall/"], signingKey: key)
        options.now = now
        _ = try Publisher.publish(options)
    }

    @Test("a clock six months fast refuses fresh metadata and keeps serving; corrected, it updates; a device off for six months updates")
    func clocks() async throws {
        let dir = TemporaryDirectory("tuf-clock")
        let out = dir.file("publish"), key = SigningKey.generate()
        // Whole seconds: metadata writes `expires` to the second.
        let now = Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down))
        try Self.publish("1.0.0", out: out, key: key, at: now)
        let server = try await OfflineServerProcess(arguments: ["--dir", out, "--no-reports"])
        let clock = FakeClock(now)
        var configuration = AgentConfiguration()
        configuration.clock = { clock.now }
        let agent = Agent(root: URL(fileURLWithPath: dir.file("device")), configuration: configuration)
        var options = SyncOptions()
        options.force = true
        options.trustedRoot = try Data(contentsOf: URL(fileURLWithPath: "\(out)/metadata/1.root.json"))
        let manifest = URL(string: "\(server.baseURL)/mall/manifest.json")!
        var report = await agent.sync(app: "mall", manifest: manifest, options: options)
        #expect(report.result == .updated && report.version == Version("1.0.0"), "\(report.error?.description ?? "")")

        // The clock jumps six months ahead (a dead RTC battery, a bad NTP answer): the
        // repository's 7-day timestamp is past, so nothing is trusted and nothing changes.
        try Self.publish("1.1.0", out: out, key: key, at: now)
        clock.set(now.addingTimeInterval(Self.sixMonths))
        report = await agent.sync(app: "mall", manifest: manifest, options: options)
        #expect(report.result == .failed && report.error?.cause == .metadataExpired, "\(report.result) \(report.error?.description ?? "")")
        let serving = try await agent.status(app: "mall").first
        #expect(serving?.installed?.version == Version("1.0.0") && serving?.usable == true)

        // The clock is right again: the same repository updates the device.
        clock.set(now.addingTimeInterval(60))
        report = await agent.sync(app: "mall", manifest: manifest, options: options)
        #expect(report.result == .updated && report.version == Version("1.1.0"), "\(report.error?.description ?? "")")

        // Off for six months: every piece of metadata the device trusts has expired since.
        // The repository re-signed meanwhile (a release or the timestamp cron): it updates.
        let later = now.addingTimeInterval(Self.sixMonths)
        try Self.publish("1.2.0", out: out, key: key, at: later)
        clock.set(later.addingTimeInterval(60))
        report = await agent.sync(app: "mall", manifest: manifest, options: options)
        #expect(report.result == .updated && report.version == Version("1.2.0"), "\(report.error?.description ?? "")")
        await server.stop()
    }
}
