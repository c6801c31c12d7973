import Foundation
import OfflineAgent
import OfflinePublish
import TestSupport
import Testing

/// The loop closed end to end: 50 `offline-agent` processes, each a device with an id of
/// its own, sync against `offline-server` processes while a staged version fails on some
/// of them (the first downloads are corrupted, `--fault`); the rollout halts by itself at
/// the threshold, re-signed on disk, and every device keeps a working version. Once on
/// SQLite with one server, once on PostgreSQL with two servers sharing the database.
@Suite("Auto-halt: a fleet of 50 agent processes", .serialized)
struct FleetAutoHaltTests {
    static let devices = 50
    static let rules = "failure-rate>20%,min-devices=10,window=1h"

    /// The publish directory, key and device roots of one run.
    struct Fleet {
        let dir: String
        let keyPath: String
        let key: SigningKey
        var roots: [String] { (0..<FleetAutoHaltTests.devices).map { "\(dir)/device-\($0)" } }
    }

    static func makeFleet(_ label: String) throws -> Fleet {
        let dir = try PublishFixtures.temporaryDirectory(label)
        let key = SigningKey.generate()
        try key.write(to: dir + "/key")
        return Fleet(dir: dir + "/publish", keyPath: dir + "/key", key: key)
    }

    static func publish(_ fleet: Fleet, _ version: String, source: String, stage: Int?) throws {
        var options = PublishOptions(
            app: "fleet", version: Version(version)!, sourceDirectory: PublishFixtures.sampleApp(source),
            publishDirectory: fleet.dir, whitelist: ["https://h5.example.com/fleet/"], signingKey: fleet.key)
        options.stage = stage
        _ = try Publisher.publish(options)
    }

    /// Every device syncs at once, device `i` against `servers[i % servers.count]`, reporting
    /// to the same server; returns each run's JSON line (`result`, `version`).
    static func syncAll(_ fleet: Fleet, _ servers: [OfflineServerProcess]) async throws -> [[String: Any]] {
        let roots = fleet.roots, key = fleet.key.publicKeyBase64
        let urls = servers.map(\.baseURL)
        let results = try await LocalHTTP.onThread {
            // All started before any is waited for: the fleet syncs concurrently.
            let running = try roots.enumerated().map { index, root in
                let base = urls[index % urls.count]
                return try CLI.start([
                    "sync", "--root", root, "--app", "fleet", "--manifest", base + "/manifest", "--public-key", key,
                    "--report", base + "/report", "--report-deadline", "30", "--network", "unmetered", "--force", "--json",
                ])
            }
            return running.map { CLI.finishBlocking($0) }
        }
        return results.enumerated().map { index, result in
            let line = result.stdout.split(separator: "\n").last.map(String.init) ?? ""
            var object = CLI.json(line) ?? [:]
            object["exit"] = Int(result.status)
            object["device"] = index
            return object
        }
    }

    static func active(_ root: String) -> String? {
        Store(root: root).active("fleet")?.version.description
    }

    /// Round 1 installs 1.0.0 everywhere; 2.0.0 is published at stage 60; round 2 syncs it
    /// through servers that corrupt the first downloads and halt; round 3 changes nothing.
    static func run(
        _ fleet: Fleet, servers makeServers: (_ extra: [String]) async throws -> [OfflineServerProcess]
    ) async throws {
        try publish(fleet, "1.0.0", source: "1.0.0", stage: nil)
        var servers = try await makeServers([])
        let first = try await syncAll(fleet, servers)
        for server in servers { await server.stop() }
        for result in first {
            #expect(result["exit"] as? Int == 0 && result["result"] as? String == "updated", "\(result)")
        }
        #expect(fleet.roots.allSatisfy { active($0) == "1.0.0" })

        try publish(fleet, "2.0.0", source: "1.1.0", stage: 60)
        // The first patch and full downloads of each server are corrupted: a device that got
        // both fails its update (hash-mismatch) and stays on 1.0.0.
        let perServer = 12 / max(1, servers.count)
        servers = try await makeServers([
            "--auto-halt", rules, "--fault", "corrupt=patch*\(perServer)", "--fault", "corrupt=package*\(perServer)",
        ])
        do {
            let second = try await syncAll(fleet, servers)
            let failed = second.filter { $0["result"] as? String == "failed" }.count
            let updated = second.filter { $0["result"] as? String == "updated" }.count
            #expect(failed >= 1, "some devices fail: \(second)")
            #expect(second.allSatisfy { ["failed", "updated", "not-in-stage"].contains($0["result"] as? String) }, "\(second)")

            // Halted by itself, re-signed in the publish directory (reports are stored, and the
            // halt written, before each batch is answered; a device's post may still be in
            // flight when its sync ends, so wait: 5 minutes bound a halt that never comes).
            var state = try #require(try PublishState.load(appDirectory: fleet.dir + "/fleet"))
            for _ in 0..<3000 where state.stage != 0 {
                try await Task.sleep(for: .milliseconds(100))
                state = try #require(try PublishState.load(appDirectory: fleet.dir + "/fleet"))
            }
            #expect(state.stage == 0, "halted: \(String(describing: state.revisions?.last))")
            let revision = try #require(state.revisions?.last)
            #expect(revision.verb == "auto-halt")
            #expect(revision.reason.contains("failure-rate>20%"), "\(revision.reason)")
            // At the threshold: at least min-devices tried, and more than 20 % of them failed.
            let figures = try #require(revision.reason.firstMatch(of: /: (\d+) of (\d+) devices in the stage failed/))
            let (failing, tried) = (Int(figures.1)!, Int(figures.2)!)
            #expect(tried >= 10 && failing * 100 > tried * 20, "\(revision.reason)")
            #expect(failing <= failed, "only failures devices had count")

            // Devices that took 2.0.0 keep it; the others keep 1.0.0, and no new device takes it.
            let before = fleet.roots.map(active)
            #expect(before.allSatisfy { $0 == "1.0.0" || $0 == "2.0.0" })
            #expect(before.filter { $0 == "2.0.0" }.count == updated)
            let third = try await syncAll(fleet, servers)
            for result in third {
                #expect(result["exit"] as? Int == 0, "\(result)")
                #expect(["up-to-date", "not-in-stage"].contains(result["result"] as? String), "\(result)")
            }
            #expect(fleet.roots.map(active) == before)

            // Every server says so, with the same figures (after round 3, which sends any report
            // a loaded machine left queued past a sync's 3 s report deadline; it adds none).
            var answers: [String] = []
            for server in servers {
                let stats = try await FleetStats.stats(server.baseURL, app: "fleet")
                let v2 = try #require(FleetStats.version(stats, "2.0.0"))
                #expect(v2["halted"] as? Bool == true)
                #expect((v2["reason"] as? String)?.contains("failure-rate>20%") == true)
                #expect(v2["failed"] as? Int == failed)
                #expect(v2["updated"] as? Int == updated)
                #expect(try await FleetStats.metrics(server.baseURL).value(
                    "offline_server_rollout_halted", ["app": "fleet", "version": "2.0.0"]) == 1)
                answers.append(try await FleetStats.statsText(server.baseURL, app: "fleet"))
            }
            #expect(Set(answers).count == 1, "the servers agree")
        } catch {
            for server in servers { await server.stop() }
            throw error
        }
        for server in servers { await server.stop() }
    }

    @Test("SQLite, one server: the rollout halts at the threshold and the healthy version keeps serving")
    func sqlite() async throws {
        let fleet = try Self.makeFleet("fleet-halt-sqlite")
        defer { PublishFixtures.cleanUp(URL(fileURLWithPath: fleet.dir).deletingLastPathComponent().path) }
        try await Self.run(fleet) { extra in
            [try await OfflineServerProcess(arguments: ["--dir", fleet.dir, "--key", fleet.keyPath, "--open-collector"] + extra)]
        }
    }

    @Test(
        "PostgreSQL, two servers on one database: one collector, one halt",
        .enabled(if: PostgresTestDatabase.isAvailable, "\(PostgresTestDatabase.server.skipReason ?? "")"))
    func postgres() async throws {
        let fleet = try Self.makeFleet("fleet-halt-postgres")
        defer { PublishFixtures.cleanUp(URL(fileURLWithPath: fleet.dir).deletingLastPathComponent().path) }
        let database = try await PostgresTestDatabase("fleet")
        defer { database.drop() }
        try await Self.run(fleet) { extra in
            var servers: [OfflineServerProcess] = []
            for _ in 0..<2 {
                servers.append(try await OfflineServerProcess(arguments: ["--dir", fleet.dir, "--key", fleet.keyPath, "--open-collector", "--reports-db", database.url] + extra))
            }
            return servers
        }
    }
}
