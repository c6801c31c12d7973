import Foundation
import OfflinePublish
import Testing
@testable import OfflineAgent
import TestSupport

/// The issue's fleet as real processes: 100 `offline-agent sync --report` processes, each
/// with a root (and so a device id) of its own, run concurrently against `offline-server`
/// processes over one publish directory; the collector's `/stats` and `/metrics` then add
/// up exactly to what the devices did. Half the devices are killed (`kill -9`, the report
/// crash point) after queueing their event and before posting it: the next run, throttled,
/// posts it. Then those queues are put back as they were before the post (what a lost
/// answer leaves) and the fleet runs again: every event is resent, none is counted twice.
@Suite("Fleet: 100 agent processes report to offline-server", .serialized)
struct FleetDevicesTests {
    typealias F = PublishFixtures

    /// What device `i` is and does: a deterministic split of the hundred.
    enum Kind: CaseIterable {
        /// At 1.0.0: takes the patch to 1.1.0.
        case patched
        /// Empty: takes the full package.
        case fresh
        /// At 1.0.0, through a server that corrupts the patch and the package: `hash-mismatch`.
        case corrupted
        /// Empty, through a server that answers the package with 500: `http-status`.
        case refused

        init(device i: Int) {
            switch i % 10 {
            case 0..<5: self = .patched
            case 5..<8: self = .fresh
            case 8: self = .corrupted
            default: self = .refused
            }
        }

        var startsAtOld: Bool { self == .patched || self == .corrupted }
    }

    static let devices = 100
    /// Processes at once: all 100 are separate processes, 16 running together (on two
    /// cores, more only adds load to the tests running beside this one).
    static let concurrency = 16

    /// Runs `arguments(i)` for every device as its own `offline-agent` process (with
    /// `environment(i)` added), at most `concurrency` at once.
    static func runFleet(
        environment: @escaping @Sendable (Int) -> [String: String] = { _ in [:] }, _ arguments: @escaping @Sendable (Int) -> [String]
    ) async throws -> [Int: CLI.Result] {
        try await withThrowingTaskGroup(of: (Int, CLI.Result).self) { group in
            var results: [Int: CLI.Result] = [:]
            for i in 0..<min(concurrency, devices) {
                group.addTask { (i, try await CLI.run(arguments(i), environment: environment(i))) }
            }
            var next = min(concurrency, devices)
            while let (i, result) = try await group.next() {
                results[i] = result
                if next < devices {
                    let n = next
                    group.addTask { (n, try await CLI.run(arguments(n), environment: environment(n))) }
                    next += 1
                }
            }
            return results
        }
    }

    /// Devices 0–9, 20–29, …: killed in the first run between queueing and posting.
    static func crashes(_ i: Int) -> Bool { (i / 10) % 2 == 0 }

    /// The events queued for `url` under `root`, not yet acknowledged.
    static func queued(_ root: String, _ url: URL) throws -> [[String: Any]] {
        guard let batch = try ReportQueue(root: root, url: url, maxEvents: 1000).batch(limit: 500) else { return [] }
        let body = try JSONSerialization.jsonObject(with: Data(batch.body)) as? [String: Any]
        return body?["events"] as? [[String: Any]] ?? []
    }

    @Test("100 concurrent devices: patch, full and two known failures; /stats and /metrics add up; a resent fleet counts once")
    func hundredDevices() async throws {
        let dir = TemporaryDirectory("fleet-devices")
        let out = dir.file("publish")
        // big.bin is the same in both versions, so the patch is far smaller than the package.
        let v1 = try StaticCDNTests.source("1.0.0", in: dir.path, name: "1.0.0", bigBytes: 128 << 10, seed: 5)
        let v2 = try StaticCDNTests.source("1.1.0", in: dir.path, name: "1.1.0", bigBytes: 128 << 10, seed: 5)
        try StaticCDNTests.publish(v1, version: "1.0.0", out: out, key: nil)

        // The collector, and the two faulty servers the failing devices check (no reports of their own).
        let server = try await OfflineServerProcess(arguments: ["--dir", out, "--open-collector"])
        defer { server.stopInBackground() }
        let corrupting = try await OfflineServerProcess(arguments: ["--dir", out, "--no-reports", "--fault", "corrupt=patch", "--fault", "corrupt=package"])
        defer { corrupting.stopInBackground() }
        let refusing = try await OfflineServerProcess(arguments: ["--dir", out, "--no-reports", "--fault", "status=500@package"])
        defer { refusing.stopInBackground() }

        // One device installs 1.0.0 (reporting nowhere); the old devices are copies of its root
        // without its device id, so each makes its own on first use.
        let template = dir.file("template")
        let first = try await CLI.run(["sync", "--allow-unsigned", "--root", template, "--app", "sample", "--manifest", server.manifestURL, "--json"])
        #expect(CLI.json(first.stdout)?["result"] as? String == "updated", "\(first.stdout) \(first.stderr)")
        try? FileManager.default.removeItem(atPath: "\(template)/device-id")
        try? FileManager.default.removeItem(atPath: ReportQueue.directory(root: template))
        let roots = (0..<Self.devices).map { dir.file(String(format: "device-%03d", $0)) }
        for (i, root) in roots.enumerated() where Kind(device: i).startsAtOld {
            try FileManager.default.copyItem(atPath: template, toPath: root)
        }
        try StaticCDNTests.publish(v2, version: "1.1.0", out: out, key: nil)
        let state = try #require(try PublishState.load(appDirectory: "\(out)/sample"))
        let patchSize = Int(try #require(state.patches.first { $0.from == Version("1.0.0") }).size)
        let manifest = try Manifest.decode(try Data(contentsOf: URL(fileURLWithPath: "\(out)/sample/manifest.json")))
        let fullSize = Int(manifest.fullFile.size)
        #expect(patchSize < fullSize / 4, "patch \(patchSize), package \(fullSize)")

        let report = server.baseURL + "/report"
        let manifests: [Kind: String] = [
            .patched: server.manifestURL, .fresh: server.manifestURL,
            .corrupted: corrupting.manifestURL, .refused: refusing.manifestURL,
        ]
        // A generous report deadline: 25 devices post at once to one SQLite writer on a loaded
        // machine, and this test is about what arrives, not how fast.
        @Sendable func sync(_ i: Int, force: Bool) -> [String] {
            ["sync", "--allow-unsigned", "--root", roots[i], "--app", "sample", "--manifest", manifests[Kind(device: i)]!, "--json",
             "--report", report, "--report-deadline", "60"] + (force ? ["--force"] : [])
        }

        // MARK: The fleet syncs; half are killed before their post

        let reportURL = try #require(URL(string: report))
        let crashPoint = ["OFFLINE_AGENT_CRASH_AT": "before-report-post"]
        let results = try await Self.runFleet(environment: { Self.crashes($0) ? crashPoint : [:] }) { sync($0, force: true) }
        #expect(results.count == Self.devices)
        var downloaded = 0
        for i in 0..<Self.devices {
            let run = try #require(results[i])
            // What the device did: its --json report, or for a killed one the event it queued.
            let outcome: (result: String?, via: String?, bytes: Int, errorCode: String?)
            if Self.crashes(i) {
                #expect(run.signaled, "\(i): killed before the post: \(run.stdout) \(run.stderr)")
                let events = try Self.queued(roots[i], reportURL)
                #expect(events.count == 1, "\(i): \(events)")
                let event = events.first ?? [:]
                outcome = (event["event"] as? String, event["via"] as? String, event["bytes"] as? Int ?? -1, event["errorCode"] as? String)
                // Kept aside: the queue as it was before any post.
                try FileManager.default.copyItem(atPath: ReportQueue.directory(root: roots[i]), toPath: roots[i] + ".queued")
            } else {
                let json = CLI.json(run.stdout) ?? [:]
                #expect(run.status == 0 || json["result"] as? String == "failed", "\(i): \(run.stdout) \(run.stderr)")
                outcome = (json["result"] as? String, json["via"] as? String, json["bytesDownloaded"] as? Int ?? -1, json["errorCode"] as? String)
            }
            downloaded += outcome.bytes
            switch Kind(device: i) {
            case .patched:
                #expect(outcome.result == "updated" && outcome.via == "patch" && outcome.bytes == patchSize, "\(i): \(outcome)")
                try StaticCDNTests.expectInstalled(v2, version: "1.1.0", root: roots[i])
            case .fresh:
                #expect(outcome.result == "updated" && outcome.via == "full" && outcome.bytes == fullSize, "\(i): \(outcome)")
                try StaticCDNTests.expectInstalled(v2, version: "1.1.0", root: roots[i])
            case .corrupted:
                // Both files came whole and failed their hash: the old version stays.
                #expect(outcome.result == "failed" && outcome.errorCode == "hash-mismatch", "\(i): \(outcome)")
                #expect(outcome.bytes == patchSize + fullSize, "\(i): \(outcome)")
                try StaticCDNTests.expectInstalled(v1, version: "1.0.0", root: roots[i])
            case .refused:
                #expect(outcome.result == "failed" && outcome.errorCode == "http-status" && outcome.bytes == 0, "\(i): \(outcome)")
                #expect(Store(root: roots[i]).active("sample") == nil)
            }
        }
        let ids = try roots.map { try String(contentsOfFile: "\($0)/device-id", encoding: .utf8) }
        #expect(Set(ids).count == Self.devices, "every device has an id of its own")

        // What the fleet did, counted here from the split (the sizes are checked per device above).
        let count = { (kind: Kind) in (0..<Self.devices).filter { Kind(device: $0) == kind }.count }
        let (patched, fresh, corrupted, refused) = (count(.patched), count(.fresh), count(.corrupted), count(.refused))
        #expect(downloaded == patched * patchSize + fresh * fullSize + corrupted * (patchSize + fullSize))
        let saved = patched * (fullSize - patchSize)
        let live = try await FleetStats.stats(server.baseURL, app: "sample")
        #expect(live["events"] as? Int == Self.devices / 2, "only the devices not killed have posted: \(live)")

        /// The collector's view equals the fleet's, exactly.
        func expectFleet(_ label: String) async throws {
            let stats = try await FleetStats.stats(server.baseURL, app: "sample")
            #expect(stats["events"] as? Int == Self.devices, "\(label): \(stats)")
            #expect(stats["devices"] as? Int == Self.devices, "\(label): distinct device ids")
            #expect(stats["bytesDownloaded"] as? Int == downloaded, "\(label)")
            #expect(stats["bytesSaved"] as? Int == saved, "\(label)")
            // Every event names 1.1.0: what the updates installed and what the failures tried.
            #expect((stats["versions"] as? [[String: Any]])?.count == 1, "\(label): \(stats)")
            let latest = try #require(FleetStats.version(stats, "1.1.0"), "\(label): \(stats)")
            #expect(latest["devices"] as? Int == patched + fresh, "\(label): \(latest)")
            #expect(latest["updated"] as? Int == patched + fresh, "\(label): \(latest)")
            #expect(latest["failed"] as? Int == corrupted + refused, "\(label): \(latest)")
            #expect(latest["successRate"] as? Double == Double(patched + fresh) / Double(Self.devices), "\(label): \(latest)")
            #expect(latest["bytesSaved"] as? Int == saved, "\(label): \(latest)")
            let top = latest["topFailures"] as? [[String: Any]] ?? []
            #expect(top.map { $0["errorCode"] as? String } == ["hash-mismatch", "http-status"], "\(label): \(top)")
            #expect(top.map { $0["count"] as? Int } == [corrupted, refused], "\(label): \(top)")

            let metrics = try await FleetStats.metrics(server.baseURL)
            func value(_ name: String, _ labels: [String: String]) -> Double? { metrics.value(name, ["app": "sample"].merging(labels) { $1 }) }
            #expect(value("offline_server_report_updates_total", ["version": "1.1.0", "via": "patch"]) == Double(patched), "\(label)")
            #expect(value("offline_server_report_updates_total", ["version": "1.1.0", "via": "full"]) == Double(fresh), "\(label)")
            #expect(value("offline_server_report_failures_total", ["cause": "hash-mismatch"]) == Double(corrupted), "\(label)")
            #expect(value("offline_server_report_failures_total", ["cause": "http-status"]) == Double(refused), "\(label)")
            #expect(value("offline_server_report_events_total", ["event": "updated"]) == Double(patched + fresh), "\(label)")
            #expect(value("offline_server_report_events_total", ["event": "failed"]) == Double(corrupted + refused), "\(label)")
            #expect(value("offline_server_report_downloaded_bytes_total", [:]) == Double(downloaded), "\(label)")
            #expect(value("offline_server_report_saved_bytes_total", [:]) == Double(saved), "\(label)")
        }

        /// The same fleet unforced: within the throttle no sync checks or reports anything
        /// new, but each run ends by posting what its queue holds.
        func throttledRun(_ label: String) async throws {
            let again = try await Self.runFleet { sync($0, force: false) }
            for i in 0..<Self.devices {
                let json = CLI.json(again[i]?.stdout ?? "") ?? [:]
                #expect(json["result"] as? String == "throttled", "\(label) \(i): \(again[i]?.stdout ?? "") \(again[i]?.stderr ?? "")")
                #expect(try Self.queued(roots[i], reportURL).isEmpty, "\(label) \(i): the queue was delivered")
            }
        }

        // MARK: The killed devices' events arrive with their next run

        try await throttledRun("after the kill")
        try await expectFleet("after the kill")

        // MARK: Lost answers: the same events again, counted once

        for i in 0..<Self.devices where Self.crashes(i) {
            let queue = ReportQueue.directory(root: roots[i])
            try FileManager.default.removeItem(atPath: queue)
            try FileManager.default.copyItem(atPath: roots[i] + ".queued", toPath: queue)
            #expect(try Self.queued(roots[i], reportURL).count == 1)
        }
        try await throttledRun("after the resend")
        try await expectFleet("after the resend")
    }
}
