import Foundation
import OfflineServe
import Testing
@testable import OfflineAgent
import TestSupport

/// The lifecycle commands as real processes against real loopback servers, serve's
/// control routes, and `kill -9` in the middle of every kind of rollback.
@Suite("Lifecycle CLI", .serialized)
struct LifecycleCLITests {
    struct Setup {
        let h: SyncHarness
        var base: [String] { ["--root", h.root.path] }
        var app: [String] { base + ["--app", "mall"] }
        var sync: [String] { ["sync", "--allow-unsigned"] + app + ["--manifest", h.origin.manifestURL.absoluteString, "--force", "--json"] }

        /// 1.0.0 installed (confirmed when `confirmed`), then 1.1.0 installed on trial
        /// (the publisher asks for 3 launches; `limit`: the device's own setting).
        init(confirmed: Bool = true, limit: Int? = nil) async throws {
            h = try SyncHarness()
            try await h.install("1.0.0")
            if confirmed { #expect(try await CLI.run(["mark-good"] + app).status == 0) }
            h.origin.setManifest(try h.patch(from: "1.0.0", to: "1.1.0", ["trialLaunches": 3]))
            let installed = try await CLI.run(sync + (limit.map { ["--max-trial-launches", "\($0)"] } ?? []))
            #expect(installed.status == 0, "\(installed.stderr)")
        }

        func status() async throws -> [String: Any] {
            let result = try await CLI.run(["status"] + app + ["--json"])
            #expect(result.status == 0, "\(result.stderr)")
            return try #require(CLI.json(result.stdout))
        }
    }

    @Test("mark-good, mark-bad --reason, status --json, history, and sync --json known-bad (exit 0, nothing downloaded)")
    func commands() async throws {
        let s = try await Setup(confirmed: false)
        var status = try await s.status()
        #expect(status["state"] as? String == "trial")
        #expect(status["launches"] as? Int == 0)
        #expect(status["held"] as? Bool == false)
        #expect(status["badVersions"] as? [String] == [])

        let good = try await CLI.run(["mark-good"] + s.app)
        #expect(good.status == 0, "\(good.stderr)")
        #expect(good.stdout.contains("1.1.0 confirmed good"))
        #expect(try await s.status()["state"] as? String == "good")

        let bad = try await CLI.run(["mark-bad"] + s.app + ["--reason", "blank page on launch"])
        #expect(bad.status == 0, "\(bad.stderr)")
        #expect(bad.stdout.contains("1.1.0 marked bad; 1.0.0 is active"), "\(bad.stdout)")
        #expect(s.h.activeMatches("1.0.0"))
        status = try await s.status()
        #expect(status["version"] as? String == "1.0.0")
        #expect(status["badVersions"] as? [String] == ["1.1.0"])

        let history = try await CLI.run(["history"] + s.app + ["--json"])
        #expect(history.status == 0, "\(history.stderr)")
        let events = try #require(CLI.json(history.stdout)?["history"] as? [[String: Any]])
        #expect(events.map { $0["event"] as? String } == ["install", "install", "mark-good", "mark-bad"])
        let last = try #require(events.last)
        #expect(last["from"] as? String == "1.1.0" && last["to"] as? String == "1.0.0")
        #expect(last["reason"] as? String == "blank page on launch")
        #expect(last["at"] is String)
        let text = try await CLI.run(["history"] + s.app)
        #expect(text.stdout.contains("mark-bad 1.1.0 -> 1.0.0: blank page on launch"), "\(text.stdout)")

        let before = s.h.origin.requests.count
        let refused = try await CLI.run(s.sync)
        #expect(refused.status == 0, "\(refused.stderr)")
        let json = try #require(CLI.json(refused.stdout))
        #expect(json["result"] as? String == "known-bad")
        #expect(json["version"] as? String == "1.0.0")
        #expect(json["bytesDownloaded"] as? Int == 0)
        #expect(s.h.origin.requests.count == before + 1)

        // Refusals carry their cause: mark-good of nothing active (another app), usage.
        #expect(try await CLI.run(["mark-good"] + s.base + ["--app", "../x"]).status == 64)
        let none = try await CLI.run(["mark-bad"] + s.base + ["--app", "shop"])
        #expect(none.status == 1 && none.stderr.contains("no version of 'shop' is installed"), "\(none.stderr)")
    }

    @Test("hold: sync --json says held, exit 0, nothing downloaded; unhold: the next sync installs")
    func holdCommands() async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        let app = ["--root", h.root.path, "--app", "mall"]
        let sync = ["sync", "--allow-unsigned"] + app + ["--manifest", h.origin.manifestURL.absoluteString, "--force", "--json"]
        #expect(try await CLI.run(["hold"] + app).status == 0)
        #expect(CLI.json(try await CLI.run(["status"] + app + ["--json"]).stdout)?["held"] as? Bool == true)
        h.origin.setManifest(h.full("1.1.0"))
        let held = try await CLI.run(sync)
        #expect(held.status == 0, "\(held.stderr)")
        #expect(CLI.json(held.stdout)?["result"] as? String == "held")
        #expect(h.origin.requests(for: "/files/1.1.0.zip").isEmpty)
        #expect(h.activeMatches("1.0.0"))
        #expect(try await CLI.run(["unhold"] + app).status == 0)
        let updated = try await CLI.run(sync)
        #expect(CLI.json(updated.stdout)?["result"] as? String == "updated", "\(updated.stderr)")
        #expect(h.activeMatches("1.1.0"))
    }

    @Test("rollback marks the version it leaves bad; the next sync reports known-bad")
    func rollbackCommand() async throws {
        let s = try await Setup()
        let rollback = try await CLI.run(["rollback"] + s.app)
        #expect(rollback.status == 0, "\(rollback.stderr)")
        #expect(s.h.activeMatches("1.0.0"))
        #expect(try await s.status()["badVersions"] as? [String] == ["1.1.0"])
        #expect(CLI.json(try await CLI.run(s.sync).stdout)?["result"] as? String == "known-bad")
        #expect(s.h.activeMatches("1.0.0"))
    }

    @Test("sync --max-trial-launches and the config file's maxTrialLaunches set the trial's limit")
    func trialLimitSettings() async throws {
        let s = try await Setup(limit: 5)
        #expect(try await s.status()["maxTrialLaunches"] as? Int == 5)
        let h = try SyncHarness()
        h.origin.setManifest(h.full("1.0.0"))
        let config = h.root.file("agent.json")
        let root = h.root.file("data")
        try """
            {"root": "\(root)", "allowUnsigned": true, "maxTrialLaunches": 1, "apps": [{"app": "mall", "manifest": "\(h.origin.manifestURL)"}]}
            """.write(toFile: config, atomically: true, encoding: .utf8)
        #expect(try await CLI.run(["sync", "--config", config]).status == 0)
        let status = CLI.json(try await CLI.run(["status", "--root", root, "--app", "mall", "--json"]).stdout)
        #expect(status?["maxTrialLaunches"] as? Int == 1)
        #expect(try await CLI.run(["sync", "--allow-unsigned", "--root", root, "--app", "mall", "--manifest", "http://x/", "--max-trial-launches", "-1"]).status == 64)
    }

    // MARK: - serve

    /// Starts `offline-agent serve` on a free port; returns it and its port.
    static func serve(_ root: String, _ extra: [String] = [], environment: [String: String] = [:]) async throws -> (CLI.Running, Int) {
        let running = try CLI.start(["serve", "--root", root, "--port", "0", "--device-id", "d"] + extra, environment: environment)
        let line = await running.out.fileHandleForReading.availableLine()
        guard let port = line.split(separator: ":").last.flatMap({ Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }) else {
            running.process.terminate()
            throw LocalHTTP.Failure(description: "serve did not start: \(line)")
        }
        return (running, port)
    }

    static func open(_ port: Int, _ page: String = "index.html") async throws -> LocalHTTP.Response {
        try await LocalHTTP.request(port: port, "/open?url=\((SyncHarness.whitelist + page).localQueryEncoded)")
    }

    @Test("serve: each /open of a trial counts; after --max-trial-launches the next /open rolls back first")
    func serveCountsLaunches() async throws {
        let s = try await Setup()
        let (server, port) = try await Self.serve(s.h.root.path, ["--max-trial-launches", "2"])
        defer { CLI.terminateInBackground(server) }
        for n in 1...2 {
            let response = try await Self.open(port)
            #expect(response.header("location") == "http://h5.example.com.localhost:\(port)/mall/index.html")
            #expect(try await s.status()["launches"] as? Int == n)
            let file = try await LocalHTTP.request(port: port, "/mall/index.html")
            #expect(file.header("x-offline-version") == "1.1.0")
        }
        let third = try await Self.open(port)
        #expect(third.header("location") == "http://h5.example.com.localhost:\(port)/mall/index.html")
        let file = try await LocalHTTP.request(port: port, "/mall/index.html")
        #expect(file.header("x-offline-version") == "1.0.0")
        #expect(file.body == s.h.expected("1.0.0", "index.html"))
        #expect(try await s.status()["badVersions"] as? [String] == ["1.1.0"])
        #expect(CLI.json(try await CLI.run(s.sync).stdout)?["result"] as? String == "known-bad")
    }

    @Test("serve: /session/restore counts a launch of its current entry's app; /session/item and HEAD /open do not")
    func serveCountsRestores() async throws {
        let s = try await Setup()
        let (server, port) = try await Self.serve(s.h.root.path)
        defer { CLI.terminateInBackground(server) }
        let history = #"{"history": ["https://elsewhere.example/", "\#(SyncHarness.whitelist)index.html"], "currentPage": 0}"#
        let restore = try await LocalHTTP.request(port: port, "/session/restore?history=\(history.localQueryEncoded)")
        #expect(restore.status == 200, "\(restore.text)")
        #expect(try await s.status()["launches"] as? Int == 1)
        let item = try await LocalHTTP.request(port: port, "/session/item?url=\((SyncHarness.whitelist + "index.html").localQueryEncoded)")
        #expect(item.header("location") == "http://h5.example.com.localhost:\(port)/mall/index.html")
        _ = try await LocalHTTP.request(port: port, "/open?url=\((SyncHarness.whitelist).localQueryEncoded)", method: "HEAD")
        #expect(try await s.status()["launches"] as? Int == 1)
    }

    @Test("serve: POST /.offline-agent/mark-good and mark-bad answer JSON; only POST, only from the app's mirror origin, only for the version the page runs")
    func serveControlRoutes() async throws {
        let s = try await Setup(confirmed: false)
        let (server, port) = try await Self.serve(s.h.root.path)
        defer { CLI.terminateInBackground(server) }
        let mirror = "h5.example.com.localhost:\(port)"
        func post(_ target: String, _ headers: [(String, String)], host: String? = mirror) async throws -> LocalHTTP.Response {
            try await LocalHTTP.request(port: port, target, method: "POST", headers: headers, host: host)
        }
        let page = [("Origin", "http://\(mirror)"), ("Referer", "http://\(mirror)/mall/index.html")]
        let get = try await LocalHTTP.request(port: port, "/.offline-agent/mark-good?app=mall&version=1.1.0", host: mirror)
        #expect(get.status == 405 && get.header("allow") == "POST")
        let foreign = try await post("/.offline-agent/mark-bad?app=mall&version=1.1.0", [("Origin", "https://evil.example")])
        #expect(foreign.status == 403)
        let rebinding = try await post("/.offline-agent/mark-bad?app=mall&version=1.1.0", page, host: "evil.example")
        #expect(rebinding.status == 403)
        let missing = try await post("/.offline-agent/mark-good?version=1.1.0", page)
        #expect(missing.status == 400)
        // Issue 39, row 2: the plain host is one origin for every app, so a path (or a
        // Referer a page rewrote with history.replaceState) is no identity: no control there.
        let plain = [("Origin", "http://127.0.0.1:\(port)"), ("Referer", "http://127.0.0.1:\(port)/mall/index.html")]
        let onPlain = try await post("/.offline-agent/mark-bad?app=mall&version=1.1.0", plain, host: nil)
        #expect(onPlain.status == 404 && onPlain.text.contains("mirror origin"), "\(onPlain.text)")
        // Issue 39, row 3: the version is required, and only the active one is acted on.
        let unversioned = try await post("/.offline-agent/mark-good?app=mall", page)
        #expect(unversioned.status == 400 && unversioned.text.contains("version"), "\(unversioned.text)")
        let stale = try await post("/.offline-agent/mark-good?app=mall&version=1.0.0", page)
        #expect(stale.status == 409 && stale.text.contains("version-mismatch"), "\(stale.text)")
        let staleBad = try await post("/.offline-agent/mark-bad?app=mall&version=1.0.0", page)
        #expect(staleBad.status == 409 && staleBad.text.contains("version-mismatch"), "\(staleBad.text)")
        #expect(try await s.status()["state"] as? String == "trial")
        #expect(s.h.activeMatches("1.1.0"))

        let good = try await post("/.offline-agent/mark-good?app=mall&version=1.1.0", page)
        #expect(good.status == 200, "\(good.text)")
        let goodJSON = try #require(try JSONSerialization.jsonObject(with: Data(good.body)) as? [String: Any])
        #expect(goodJSON["state"] as? String == "good" && goodJSON["version"] as? String == "1.1.0")
        #expect(try await s.status()["state"] as? String == "good")

        let bad = try await post("/.offline-agent/mark-bad?app=mall&version=1.1.0&reason=render%20failed", page)
        #expect(bad.status == 200, "\(bad.text)")
        let badJSON = try #require(try JSONSerialization.jsonObject(with: Data(bad.body)) as? [String: Any])
        #expect(badJSON["state"] as? String == "bad" && badJSON["active"] as? String == "1.0.0")
        #expect(s.h.activeMatches("1.0.0"))
        // The 1.1.0 page, still open, reports again: 1.0.0, which it never ran, stays.
        let oldPage = try await post("/.offline-agent/mark-bad?app=mall&version=1.1.0", page)
        #expect(oldPage.status == 409, "\(oldPage.text)")
        #expect(s.h.activeMatches("1.0.0"))
        // Now 1.0.0 is the first version left: marking it bad leaves nothing; serve answers network.
        let last = try await post("/.offline-agent/mark-bad?app=mall&version=1.0.0", page)
        #expect(last.status == 200)
        let lastJSON = try #require(try JSONSerialization.jsonObject(with: Data(last.body)) as? [String: Any])
        #expect(lastJSON["active"] is NSNull)
        let again = try await post("/.offline-agent/mark-bad?app=mall&version=1.0.0", page)
        #expect(again.status == 409)
        let open = try await Self.open(port)
        // Nothing served offline: the mirror of the origin still (it forwards), so the page keeps its origin.
        #expect(open.header("location") == "http://h5.example.com.localhost:\(port)/mall/index.html")
        let gated = try await LocalHTTP.request(port: port, "/mall/index.html")
        #expect(gated.status == 302 && gated.header("x-offline-fallback") == "bad-version", "\(gated.status)")
        #expect(gated.header("location") == SyncHarness.whitelist + "index.html")
        let resolve = try await CLI.run(["resolve"] + s.base + [SyncHarness.whitelist + "index.html"])
        #expect(resolve.status == 1 && resolve.stderr.contains("bad-version"), "\(resolve.stderr)")
    }

    // MARK: - kill -9

    static let rollbackPoints = ["after-mark-bad", "after-link-created", "after-rollback-switch"]

    /// After a crash at any step: the bad version is never served, 1.0.0 is whole, and the
    /// next run (a sync here) finishes the switch.
    static func checkAfterCrash(_ s: Setup, _ point: String) async throws {
        let index = try await s.h.served("index.html")
        #expect(index == nil || index == s.h.expected("1.0.0", "index.html"), "a crash at \(point) must not serve 1.1.0")
        let active = s.h.store.active("mall")?.version.description
        #expect(active == "1.0.0" || active == "1.1.0", "\(point): \(active ?? "none")")
        let next = try await CLI.run(s.sync)
        #expect(next.status == 0, "\(next.stderr)")
        #expect(CLI.json(next.stdout)?["result"] as? String == "known-bad")
        #expect(s.h.activeMatches("1.0.0"), "the switch completes after a crash at \(point)")
        #expect(try await s.h.served("index.html") == s.h.expected("1.0.0", "index.html"))
        #expect(try await s.status()["badVersions"] as? [String] == ["1.1.0"])
    }

    @Test("kill -9 during mark-bad leaves one consistent state", arguments: rollbackPoints)
    func killDuringMarkBad(_ point: String) async throws {
        let s = try await Setup()
        let crashed = try await CLI.run(["mark-bad"] + s.app, environment: ["OFFLINE_AGENT_CRASH_AT": point])
        #expect(crashed.signaled && crashed.status == SIGKILL, "mark-bad should die at \(point): \(crashed.stderr)")
        try await Self.checkAfterCrash(s, point)
    }

    @Test("kill -9 during rollback leaves one consistent state", arguments: rollbackPoints)
    func killDuringRollback(_ point: String) async throws {
        let s = try await Setup()
        let crashed = try await CLI.run(["rollback"] + s.app, environment: ["OFFLINE_AGENT_CRASH_AT": point])
        #expect(crashed.signaled && crashed.status == SIGKILL, "rollback should die at \(point): \(crashed.stderr)")
        try await Self.checkAfterCrash(s, point)
    }

    @Test("kill -9 of serve during an automatic rollback leaves one consistent state", arguments: rollbackPoints)
    func killDuringAutomaticRollback(_ point: String) async throws {
        let s = try await Setup()
        let (server, port) = try await Self.serve(s.h.root.path, ["--max-trial-launches", "1"], environment: ["OFFLINE_AGENT_CRASH_AT": point])
        _ = try await Self.open(port)
        // The second launch rolls back, and serve dies in the middle of it.
        _ = try? await Self.open(port)
        // 5 minutes bound a serve that never dies there, not a slow one.
        for _ in 0..<15_000 where server.process.isRunning { try await Task.sleep(for: .milliseconds(20)) }
        if server.process.isRunning { server.process.terminate() }
        let ended = await CLI.finish(server)
        #expect(ended.signaled && ended.status == SIGKILL, "serve should die at \(point): \(ended.stderr)")
        try await Self.checkAfterCrash(s, point)
    }
}

extension FileHandle {
    /// The first line written to this pipe (bounded: the writer starts at once or fails),
    /// read on a thread of its own: a start can take seconds on a loaded machine.
    func availableLine() async -> String {
        let bytes = try? await LocalHTTP.onThread { [self] () -> [UInt8] in
            var bytes: [UInt8] = []
            while bytes.last != UInt8(ascii: "\n") {
                let chunk = readSomeRetryingInterrupts(limit: 1)
                if chunk.isEmpty { break }
                bytes += chunk
            }
            return bytes
        }
        return String(decoding: bytes ?? [], as: UTF8.self)
    }
}
