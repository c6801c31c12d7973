import Foundation
import Testing
import OfflineAgent
import TestSupport

/// The D-Bus methods that change an app (Confirm, ReportBad, Sync), the signals, and
/// every kind of malformed call, against `serve --dbus` on a bus of the test's own.
@Suite("D-Bus methods and signals", .serialized)
struct DBusMethodTests {
    typealias Setup = DBusServiceTests.Setup
    static let stateInvalid = "org.offlineagent.Agent1.Error.StateInvalid"
    static let versionMismatch = "org.offlineagent.Agent1.Error.VersionMismatch"
    static let usage = "org.offlineagent.Agent1.Error.Usage"

    /// mall 1.0.0 confirmed, then 1.1.0 installed on trial for 3 launches.
    static func onTrial(_ h: SyncHarness) async throws {
        h.origin.setManifest(try h.patch(from: "1.0.0", to: "1.1.0", ["trialLaunches": 3]))
        let installed = try await CLI.run(["sync", "--allow-unsigned", "--root", h.root.path, "--app", "mall",
                                           "--manifest", h.origin.manifestURL.absoluteString, "--force"])
        #expect(installed.status == 0, "\(installed.stderr)")
    }

    /// The signals `watch` saw while `command` ran, up to the first `until`.
    static func signals(_ s: Setup, until: String, _ command: [String]) async throws -> (signals: [(String, [Any])], child: [String: Any]) {
        let watched = try await s.client(["watch", "120", until, "--"] + command)
        let signals = (watched["signals"] as? [[String: Any]] ?? []).map { ($0["member"] as? String ?? "", $0["args"] as? [Any] ?? []) }
        return (signals, watched["child"] as? [String: Any] ?? [:])
    }

    @Test("Confirm and ReportBad are bound to the version: another one changes nothing and names the cause")
    func versionBound() async throws {
        let s = try await Setup(prepare: Self.onTrial)
        var props = try await s.properties()
        #expect(props["ActiveVersion"] as? String == "1.1.0" && props["State"] as? String == "trial", "\(props)")
        let status = try await s.status()
        #expect(props["LaunchesLeft"] as? Int == (status["maxTrialLaunches"] as? Int ?? -1) - (status["launches"] as? Int ?? 0))
        #expect(props["LaunchesLeft"] as? Int == 3)

        // The version the host showed before the swap confirms nothing, reports nothing.
        let before = try await s.status()
        let stale = try await s.call("Confirm", "s", ["1.0.0"])
        #expect(stale["error"] as? String == Self.versionMismatch, "\(stale)")
        #expect((stale["message"] as? String)?.hasPrefix("version-mismatch: mall 1.0.0 is not the active version") == true, "\(stale)")
        let staleBad = try await s.call("ReportBad", "ss", ["1.0.0", "blank"])
        #expect(staleBad["error"] as? String == Self.versionMismatch, "\(staleBad)")
        #expect(try await s.status()["history"] as? [[String: String]] == before["history"] as? [[String: String]])
        #expect(try await s.status()["state"] as? String == "trial")

        // The active version: confirmed, and the property says so when the call returns.
        #expect(try await s.call("Confirm", "s", ["1.1.0"])["ok"] as? [Any] != nil)
        #expect(try await s.status()["state"] as? String == "good")
        props = try await s.properties()
        #expect(props["State"] as? String == "good" && props["LaunchesLeft"] as? Int == 0, "\(props)")

        // ReportBad of the active version rolls back and answers the version active now;
        // RolledBack goes to every subscriber.
        let json = String(decoding: try JSONSerialization.data(withJSONObject: ["1.1.0", "blank page"]), as: UTF8.self)
        let (signals, child) = try await Self.signals(s, until: "RolledBack", ["/usr/bin/python3", DBusServiceTests.client, "call", "mall", "ReportBad", "ss", json])
        #expect((child["stdout"] as? String)?.contains("\"ok\": [\"1.0.0\"]") == true, "\(child)")
        #expect(signals.contains { $0.0 == "RolledBack" && $0.1 as? [String] == ["mall", "1.1.0", "1.0.0", "blank page"] }, "\(signals)")
        #expect(s.h.activeMatches("1.0.0"))
        #expect(try await s.properties()["ActiveVersion"] as? String == "1.0.0")
    }

    @Test("malformed calls (huge strings, another app's URL, an unknown app, a wrong version) get the cause and change nothing")
    func malformed() async throws {
        let s = try await Setup(extraApps: []) { h in
            try await Self.onTrial(h)
            h.origin.setManifest(h.full("1.0.0", ["app": "shop", "whitelist": ["https://shop.example.com/"]]))
            let shop = try await CLI.run(["sync", "--allow-unsigned", "--root", h.root.path, "--app", "shop",
                                          "--manifest", h.origin.manifestURL.absoluteString, "--force"])
            #expect(shop.status == 0, "\(shop.stderr)")
        }
        let allBefore = try await CLI.run(["status", "--root", s.h.root.path, "--json"]).stdout
        func refused(_ method: String, _ signature: String, _ arguments: [Any], app: String = "mall", _ name: String) async throws {
            let answer = try await s.call(method, signature, arguments, app: app)
            #expect(answer["error"] as? String == name, "\(method) \(arguments.map { "\($0)".prefix(80) }): \(answer)")
        }
        let huge = "https://h5.example.com/mall/" + String(repeating: "a", count: 100_000)
        try await refused("Resolve", "s", [huge], Self.usage)
        try await refused("Resolve", "s", ["not a URL"], Self.usage)
        try await refused("Resolve", "s", ["https://shop.example.com/index.html"], "org.offlineagent.Agent1.Error.WrongApp")
        try await refused("GetApp", "s", ["nope"], app: "-", Self.stateInvalid)
        try await refused("GetApp", "s", ["../etc"], app: "-", Self.usage)
        try await refused("GetApp", "s", [String(repeating: "a", count: 65)], app: "-", Self.usage)
        try await refused("Confirm", "s", ["1.1.0"], app: "/org/offlineagent/Agent1/app/nope", "org.freedesktop.DBus.Error.UnknownObject")
        try await refused("Confirm", "s", ["1.1.0.x"], Self.usage)
        try await refused("Confirm", "s", [String(repeating: "1", count: 100)], Self.usage)
        try await refused("Confirm", "s", ["9.9.9"], Self.versionMismatch)
        try await refused("Confirm", "s", ["1.1.0"], app: "shop", Self.versionMismatch)
        try await refused("ReportBad", "ss", ["1.1.0", String(repeating: "r", count: 2000)], Self.usage)
        try await refused("ReportBad", "ss", ["1.1.0", "line\u{1}break"], Self.usage)
        try await refused("ReportBad", "ss", ["1.0.0", "old"], Self.versionMismatch)
        try await refused("Sync", "b", [true], app: "shop", Self.usage)
        // A wrong signature never reaches the service: sd-bus refuses it.
        try await refused("Confirm", "ss", ["1.1.0", "extra"], "org.freedesktop.DBus.Error.InvalidArgs")
        // Nothing changed, in any app.
        #expect(try await CLI.run(["status", "--root", s.h.root.path, "--json"]).stdout == allBefore)
        #expect(try await s.properties()["State"] as? String == "trial")
    }

    @Test("a sync by the CLI, another process, is announced: VersionInstalled, then SyncFinished")
    func cliSyncSignals() async throws {
        let s = try await Setup()
        s.h.origin.setManifest(try s.h.patch(from: "1.0.0", to: "1.1.0"))
        let (signals, child) = try await Self.signals(s, until: "SyncFinished", [CLI.binary] + s.sync)
        #expect(child["status"] as? Int == 0, "\(child)")
        let members = signals.map(\.0)
        #expect(signals.contains { $0.0 == "VersionInstalled" && $0.1 as? [String] == ["mall", "1.1.0", "1.0.0"] }, "\(signals)")
        #expect(members.firstIndex(of: "VersionInstalled") ?? .max < members.firstIndex(of: "SyncFinished") ?? -1, "\(members)")
        let finished = try #require(signals.first { $0.0 == "SyncFinished" })
        #expect(finished.1.map { "\($0)" } == ["mall", "updated", "", "/"], "\(finished)")
        #expect(try await s.properties()["ActiveVersion"] as? String == "1.1.0")
    }

    @Test("Sync answers a job at once; Progress follows a large download, then VersionInstalled and SyncFinished name the job")
    func syncMethod() async throws {
        let s = try await Setup()
        // 1.1.0 with 24 MiB more: many downloading events.
        let work = TemporaryDirectory("big")
        try FileManager.default.copyItem(atPath: "\(Repo.fixtures)/sample-app/1.1.0", toPath: work.file("app"))
        // Stored (zip -0): the download is this large whatever the bytes are.
        let big = Data(repeating: 0x5a, count: 24 << 20)
        try big.write(to: URL(fileURLWithPath: work.file("app/big.bin")))
        #expect(try await run("zip", ["-q", "-0", "-X", "-r", work.file("big.zip"), "."], cwd: work.file("app")).status == 0)
        let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: work.file("big.zip"))))
        s.h.origin.put("big.zip", bytes)
        let sha = PackageFixture.sha256(bytes)
        s.h.origin.setManifest(s.h.full("1.1.0", ["url": "files/big.zip", "size": bytes.count, "sha256": sha, "packageSha256": sha]))

        let (signals, child) = try await Self.signals(s, until: "SyncFinished", ["/usr/bin/python3", DBusServiceTests.client, "call", "mall", "Sync", "b", "[true]"])
        let answer = try #require(CLI.json(child["stdout"] as? String ?? ""), "\(child)")
        let job = try #require((answer["ok"] as? [String])?.first, "\(answer)")
        #expect(job.hasPrefix("/org/offlineagent/Agent1/job/"))
        let downloads = signals.filter { $0.0 == "Progress" && $0.1.first as? String == "mall" && $0.1[1] as? String == "downloading" }
        #expect(downloads.count >= 2, "\(signals.map(\.0))")
        #expect(downloads.allSatisfy { $0.1[3] as? Int == bytes.count }, "\(downloads.map(\.1))")
        #expect(downloads.last?.1[2] as? Int == bytes.count)
        #expect(signals.contains { $0.0 == "VersionInstalled" && $0.1 as? [String] == ["mall", "1.1.0", "1.0.0"] }, "\(signals.map(\.0))")
        let finished = try #require(signals.last)
        #expect(finished.0 == "SyncFinished" && finished.1.map { "\($0)" } == ["mall", "updated", "", job], "\(finished)")

        let outcome = try await s.tool(["busctl", "--address=\(s.bus.address)", "get-property", "org.offlineagent.Agent1", job,
                                        "org.offlineagent.Agent1.Job", "Finished", "Outcome", "ErrorCode"])
        #expect(outcome.stdout == "b true\ns \"updated\"\ns \"\"\n", "\(outcome.stdout) \(outcome.stderr)")
    }

    @Test("2,000 Resolve and Get calls leave the service's memory flat")
    func memoryFlat() async throws {
        let s = try await Setup()
        let loop = try await s.client(["loop", "2000", "mall", SyncHarness.whitelist + "index.html"])
        #expect(loop["failures"] as? Int == 0, "\(loop)")
        let before = try #require(loop["before"] as? Int), after = try #require(loop["after"] as? Int)
        // A leak of one message or reply per call would be over 2 MB here.
        #expect(after - before < 1024, "RSS \(before) KiB -> \(after) KiB")
    }
}
