import Foundation
import Testing
import OfflineAgent
import TestSupport

/// `serve --dbus` on a bus of each test's own, driven as host apps drive it: Gio proxies
/// from Python (Tests/DBus/agent_client.py), `busctl` and `gdbus call`.
@Suite("D-Bus service", .serialized)
struct DBusServiceTests {
    static let client = "\(Repo.root)/Tests/DBus/agent_client.py"
    static let appInterface = "org.offlineagent.Agent1.App"
    static let mallPath = "/org/offlineagent/Agent1/app/mall"

    /// An agent root with mall 1.0.0 (confirmed), a bus, and `serve --dbus` on it.
    final class Setup: @unchecked Sendable {
        let h: SyncHarness
        let bus: PrivateBus
        let serve: CLI.Running
        let port: Int
        let config: String

        var env: [String: String] { ["DBUS_SESSION_BUS_ADDRESS": bus.address, "DBUS_SYSTEM_BUS_ADDRESS": bus.address] }
        var sync: [String] {
            ["sync", "--allow-unsigned", "--root", h.root.path, "--app", "mall", "--manifest", h.origin.manifestURL.absoluteString, "--force", "--json"]
        }

        /// - Parameters:
        ///   - policy: the bus policy file (a system bus) or nil (a session bus, no policy).
        ///   - users: the config's `dbusUsers` for mall.
        init(policy: String? = nil, users: [String] = [], extraApps: [[String: Any]] = [], prepare: (SyncHarness) async throws -> Void = { _ in }) async throws {
            h = try SyncHarness()
            try await h.install("1.0.0")
            #expect(try await CLI.run(["mark-good", "--root", h.root.path, "--app", "mall"]).status == 0)
            try await prepare(h)
            bus = try await PrivateBus(policy: policy)
            config = h.root.path + "/../\(URL(fileURLWithPath: h.root.path).lastPathComponent)-agent.json"
            let apps: [[String: Any]] = [["app": "mall", "manifest": h.origin.manifestURL.absoluteString, "dbusUsers": users]] + extraApps
            let json = try JSONSerialization.data(withJSONObject: ["root": h.root.path, "allowUnsigned": true, "apps": apps])
            try json.write(to: URL(fileURLWithPath: config))
            let serve = try CLI.start(
                ["serve", "--root", h.root.path, "--port", "0", "--device-id", "device", "--dbus", policy == nil ? "session" : "system", "--config", config],
                environment: ["DBUS_SESSION_BUS_ADDRESS": bus.address, "DBUS_SYSTEM_BUS_ADDRESS": bus.address])
            self.serve = serve
            let listening = await serve.out.fileHandleForReading.availableLine()
            let owned = await serve.out.fileHandleForReading.availableLine()
            guard let bound = Int(listening.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: ":").last ?? ""),
                  owned.hasPrefix("dbus: org.offlineagent.Agent1 on the") else {
                serve.process.terminate()
                let result = await CLI.finish(serve)
                throw CocoaError(.fileReadUnknown, userInfo: [NSLocalizedDescriptionKey: "serve --dbus did not start: \(listening) \(owned) \(result.stderr)"])
            }
            port = bound
        }

        deinit {
            CLI.terminateInBackground(serve)
            try? FileManager.default.removeItem(atPath: config)
        }

        /// agent_client.py's JSON answer.
        func client(_ arguments: [String]) async throws -> [String: Any] {
            let result = try await CLI.run([DBusServiceTests.client] + arguments, environment: env, executable: "/usr/bin/python3")
            #expect(result.status == 0, "\(arguments): \(result.stderr)")
            return try #require(CLI.json(result.stdout), "\(arguments): \(result.stdout) \(result.stderr)")
        }

        /// A method of mall (or of the manager for "-").
        func call(_ method: String, _ signature: String, _ arguments: [Any], app: String = "mall") async throws -> [String: Any] {
            let json = String(decoding: try JSONSerialization.data(withJSONObject: arguments), as: UTF8.self)
            return try await client(["call", app, method, signature, json])
        }

        func properties(_ app: String = "mall") async throws -> [String: Any] {
            try #require(try await client(["props", app])["ok"] as? [[String: Any]]).first ?? [:]
        }

        func status() async throws -> [String: Any] {
            let result = try await CLI.run(["status", "--root", h.root.path, "--app", "mall", "--json"])
            return try #require(CLI.json(result.stdout))
        }

        /// A command line tool against the bus, as `user` (a uid) when given.
        func tool(_ arguments: [String], user: Int? = nil) async throws -> CLI.Result {
            let prefix = user.map { ["--reuid=\($0)", "--regid=\($0)", "--clear-groups", "--"] } ?? []
            return try await CLI.run(prefix + arguments, environment: env, executable: user == nil ? "/usr/bin/env" : "/usr/bin/setpriv")
        }
    }

    @Test("properties, Resolve and Status answer what status --json and resolve say, over Gio, busctl and gdbus")
    func propertiesResolveStatus() async throws {
        let s = try await Setup()
        let status = try await s.status()
        let props = try await s.properties()
        #expect(try await s.client(["props", "mall"])["path"] as? String == Self.mallPath)
        #expect(props["Name"] as? String == "mall")
        #expect(props["ActiveVersion"] as? String == status["version"] as? String)
        #expect(props["State"] as? String == status["state"] as? String)
        #expect(props["Whitelist"] as? [String] == status["whitelist"] as? [String])
        #expect(props["Usable"] as? Bool == status["usable"] as? Bool)
        #expect(props["Held"] as? Bool == status["held"] as? Bool)
        #expect(props["BytesOnDisk"] as? Int == (status["diskBytes"] as? [String: Any])?["total"] as? Int)
        #expect(props["LastCheckOutcome"] as? String == "ok")
        let lastCheck = try #require(status["lastCheck"] as? String)
        let seconds = try #require(ISO8601DateFormatter().date(from: lastCheck)).timeIntervalSince1970
        #expect(abs(Double(try #require(props["LastCheck"] as? Int)) / 1e6 - seconds) < 1)

        let manager = try #require(try await s.client(["manager"])["ok"] as? [[String: Any]]).first
        #expect(manager?["Apps"] as? [String] == [Self.mallPath])
        #expect(manager?["Root"] as? String == s.h.root.path)

        // Status() is status --json, for one app and for all.
        let cliOne = try await CLI.run(["status", "--root", s.h.root.path, "--app", "mall", "--json"]).stdout
        #expect(try await s.call("Status", "", [])["ok"] as? [String] == [cliOne.trimmingCharacters(in: .newlines)])
        let cliAll = try await CLI.run(["status", "--root", s.h.root.path, "--json"]).stdout
        #expect(try await s.call("Status", "", [], app: "-")["ok"] as? [String] == [cliAll.trimmingCharacters(in: .newlines)])

        // Resolve: the URL serve answers on its port, as `resolve --serve-port` prints it.
        let url = SyncHarness.whitelist + "index.html?q=1"
        let mirror = try await CLI.run(["resolve", "--root", s.h.root.path, "--device-id", "device", "--serve-port", "\(s.port)", url]).stdout
        let resolved = try await s.call("Resolve", "s", [url])
        #expect(resolved["ok"] as? [String] == [mirror.trimmingCharacters(in: .newlines), "1.0.0", ""], "\(resolved)")
        // A URL of the app's origin that no file serves loads from the network, with the reason.
        let missing = try await s.call("Resolve", "s", [SyncHarness.whitelist + "no-such-file.html"])
        #expect(missing["ok"] as? [String] == [SyncHarness.whitelist + "no-such-file.html", "", "missing-file"], "\(missing)")

        let busctl = try await s.tool(["busctl", "--address=\(s.bus.address)", "get-property", "org.offlineagent.Agent1", Self.mallPath, Self.appInterface, "ActiveVersion"])
        #expect(busctl.stdout == "s \"1.0.0\"\n", "\(busctl.stderr)")
        let gdbus = try await s.tool(["gdbus", "call", "--address", s.bus.address, "--dest", "org.offlineagent.Agent1", "--object-path", Self.mallPath,
                                      "--method", "\(Self.appInterface).Resolve", url])
        #expect(gdbus.stdout.contains("'\(mirror.trimmingCharacters(in: .newlines))', '1.0.0', ''"), "\(gdbus.stdout) \(gdbus.stderr)")
    }

    /// `Resolve` keeps its reading of the root between calls: each change another process
    /// makes must show in the very next call, made as soon as that process exits.
    @Test("Resolve answers each change of the root at the next call: a swap, a rewritten record (rollout), a rollback")
    func resolveFollowsChanges() async throws {
        let s = try await Setup()
        let url = SyncHarness.whitelist + "index.html"
        func resolved() async throws -> [String] { try #require(try await s.call("Resolve", "s", [url])["ok"] as? [String]) }
        func cli(_ arguments: [String]) async throws {
            let result = try await CLI.run(arguments)
            #expect(result.status == 0, "\(arguments): \(result.stderr)")
        }
        #expect(try await resolved()[1...] == ["1.0.0", ""])
        s.h.origin.setManifest(try s.h.patch(from: "1.0.0", to: "1.1.0"))
        try await cli(s.sync)
        #expect(try await resolved()[1...] == ["1.1.0", ""])
        // The same version offered again rewrites its record in versions/: this device's
        // bucket ("device", mall) is 30, above a rollout of 10.
        #expect(Resolver.rolloutBucket(deviceID: "device", app: "mall") == 30)
        s.h.origin.setManifest(s.h.full("1.1.0", ["rollout": 10]))
        try await cli(s.sync)
        #expect(try await resolved() == [url, "", "outside-rollout"])
        s.h.origin.setManifest(s.h.full("1.1.0"))
        try await cli(s.sync)
        #expect(try await resolved()[1...] == ["1.1.0", ""])
        try await cli(["mark-bad", "--root", s.h.root.path, "--app", "mall", "--reason", "test"])
        #expect(try await resolved()[1...] == ["1.0.0", ""])
    }

    /// `ResolveFile` hands a host the file itself (a descriptor, D-Bus type `h`): the
    /// decision is `Resolve`'s, and the descriptor reads the version the reply names.
    @Test("ResolveFile answers a descriptor of the file, its MIME type and version, over Gio, gdbus and busctl; refusals as Resolve's")
    func resolveFile() async throws {
        let s = try await Setup()
        let url = SyncHarness.whitelist + "index.html"
        func hex(_ path: String) throws -> String {
            try Data(contentsOf: URL(fileURLWithPath: path)).map { String(format: "%02x", $0) }.joined()
        }
        let descriptors = "/proc/\(s.serve.process.processIdentifier)/fd"
        let openBefore = try FileManager.default.contentsOfDirectory(atPath: descriptors).count
        // The descriptor is held across a sync that installs 1.1.0: it still reads 1.0.0's bytes.
        s.h.origin.setManifest(try s.h.patch(from: "1.0.0", to: "1.1.0"))
        let held = try await s.client(["file", "mall", url, "--", CLI.binary] + s.sync)
        #expect((held["child"] as? [String: Any])?["status"] as? Int == 0, "\(held)")
        let answer = try #require(held["ok"] as? [String], "\(held)")
        #expect(answer.count == 3 && answer[1] == "text/html; charset=utf-8" && answer[2] == "1.0.0", "\(answer.dropFirst())")
        #expect(answer.first == (try hex("\(Repo.fixtures)/sample-app/1.0.0/index.html")))
        #expect(held["fds"] as? Int == 1)
        // Now 1.1.0 answers, at the next call.
        let now = try #require(try await s.client(["file", "mall", url])["ok"] as? [String])
        #expect(now.first == (try hex("\(Repo.fixtures)/sample-app/1.1.0/index.html")) && now.last == "1.1.0", "\(now.dropFirst())")
        let css = try await s.client(["file", "mall", SyncHarness.whitelist + "css/app.css"])
        #expect((css["ok"] as? [String])?.dropFirst() == ["text/css; charset=utf-8", "1.1.0"], "\(css)")

        // Refused as Resolve refuses; a URL that loads from the network is NotOffline, with the reason first.
        func refused(_ url: String, _ name: String, _ reason: String? = nil) async throws {
            let answer = try await s.client(["file", "mall", url])
            #expect(answer["error"] as? String == name, "\(url.prefix(80)): \(answer)")
            if let reason { #expect((answer["message"] as? String)?.hasPrefix(reason + ": ") == true, "\(answer)") }
        }
        let notOffline = "org.offlineagent.Agent1.Error.NotOffline"
        try await refused(SyncHarness.whitelist + "no-such-file.html", notOffline, "missing-file")
        try await refused("https://elsewhere.example.com/index.html", notOffline, "not-whitelisted")
        try await refused(SyncHarness.whitelist + "../../etc/passwd", notOffline)
        try await refused("not a URL", DBusMethodTests.usage)
        try await refused("https://h5.example.com/mall/" + String(repeating: "a", count: 100_000), DBusMethodTests.usage)

        // gdbus and busctl pass the descriptor too.
        let gdbus = try await s.tool(["gdbus", "call", "--address", s.bus.address, "--dest", "org.offlineagent.Agent1", "--object-path", Self.mallPath,
                                      "--method", "\(Self.appInterface).ResolveFile", url])
        #expect(gdbus.stdout.contains("'text/html; charset=utf-8', '1.1.0')"), "\(gdbus.stdout) \(gdbus.stderr)")
        let busctl = try await s.tool(["busctl", "--address=\(s.bus.address)", "call", "org.offlineagent.Agent1", Self.mallPath, Self.appInterface, "ResolveFile", "s", url])
        #expect(busctl.stdout.hasPrefix("hss ") && busctl.stdout.hasSuffix(" \"text/html; charset=utf-8\" \"1.1.0\"\n"), "\(busctl.stdout) \(busctl.stderr)")
        // The service keeps none of the descriptors it sent.
        #expect(try FileManager.default.contentsOfDirectory(atPath: descriptors).count == openBefore)
    }

    @Test("the introspection XML in the repository is what the service answers")
    func introspection() async throws {
        let s = try await Setup()
        // A job object exists once a sync was asked for.
        let job = try #require(try await s.call("Sync", "b", [false])["ok"] as? [String]).first ?? ""
        let compared = try await s.client(["compare", "\(Repo.root)/docs/dbus/org.offlineagent.Agent1.xml", "/org/offlineagent/Agent1", Self.mallPath, job])
        #expect(compared["differences"] as? [String] == [], "\(compared)")
        #expect(compared["interfaces"] as? Int == 3)
    }
}
