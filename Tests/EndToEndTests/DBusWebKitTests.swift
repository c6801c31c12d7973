import Foundation
import Testing
import OfflineAgent
import TestSupport

/// A WebKitGTK host in Python (Tests/DBus/webkit_host.py, under xvfb-run) on the D-Bus
/// service: it shows the page, reloads on VersionInstalled and confirms its trial.
@Suite("D-Bus WebKitGTK host", .serialized)
struct DBusWebKitTests {
    @Test("the web view reloads on VersionInstalled and confirms the version it shows; confirming another changes nothing")
    func webKitHost() async throws {
        let s = try await DBusServiceTests.Setup()
        let host = try CLI.start(["-a", "/usr/bin/python3", "\(Repo.root)/Tests/DBus/webkit_host.py", "mall", SyncHarness.whitelist + "index.html", "120"],
                                 environment: s.env, executable: "/usr/bin/xvfb-run")
        #expect(await host.out.fileHandleForReading.availableLine() == "ready\n")
        s.h.origin.setManifest(try s.h.patch(from: "1.0.0", to: "1.1.0", ["trialLaunches": 3]))
        let sync = try await CLI.run(s.sync)
        #expect(sync.status == 0, "\(sync.stderr)")
        let result = await CLI.finish(host)
        let report = try #require(CLI.json(result.stdout), "\(result.stdout) \(result.stderr)")
        let loads = report["loads"] as? [[String: Any]] ?? []
        #expect(loads.map { $0["version"] as? String } == ["1.0.0", "1.1.0"], "\(loads)")
        #expect(loads.allSatisfy { ($0["uri"] as? String)?.hasPrefix("http://h5.example.com.localhost:\(s.port)/mall/") == true }, "\(loads)")
        #expect(loads.allSatisfy { !($0["title"] as? String ?? "").isEmpty }, "\(loads)")
        #expect(report["wrong"] as? String == "org.offlineagent.Agent1.Error.VersionMismatch", "\(report)")
        #expect(report["stateAfterWrong"] as? String == "trial", "\(report)")
        #expect(report["confirmed"] as? String == "1.1.0" && report["state"] as? String == "good", "\(report)")
        #expect(try await s.status()["state"] as? String == "good")
    }
}
