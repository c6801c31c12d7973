import Foundation
import Testing
import OfflineAgent
import TestSupport

/// Who may do what: the shipped bus policy on a private system bus, and the service's own
/// check of the caller against the config's users (a session bus has no policy). Callers
/// run as `nobody` (uid 65534) through setpriv.
@Suite("D-Bus policy", .serialized)
struct DBusPolicyTests {
    typealias Setup = DBusServiceTests.Setup
    static let policy = "\(Repo.root)/packaging/offline-agent/dbus/org.offlineagent.Agent1.conf"
    static let nobody = 65534

    static func gdbus(_ s: Setup, _ path: String, _ method: String, _ arguments: [String]) async throws -> CLI.Result {
        try await s.tool(["gdbus", "call", "--address", s.bus.address, "--dest", "org.offlineagent.Agent1", "--object-path", path,
                          "--method", method] + arguments, user: nobody)
    }

    @Test("a caller outside the shipped policy gets AccessDenied from the bus and nothing changes; properties, Resolve and ResolveFile stay open")
    func busPolicy() async throws {
        let s = try await Setup(policy: Self.policy, prepare: DBusMethodTests.onTrial)
        let mall = DBusServiceTests.mallPath
        let confirm = try await Self.gdbus(s, mall, "org.offlineagent.Agent1.App.Confirm", ["1.1.0"])
        #expect(confirm.status != 0 && confirm.stderr.contains("org.freedesktop.DBus.Error.AccessDenied"), "\(confirm.stderr)")
        let sync = try await Self.gdbus(s, mall, "org.offlineagent.Agent1.App.Sync", ["true"])
        #expect(sync.status != 0 && sync.stderr.contains("org.freedesktop.DBus.Error.AccessDenied"), "\(sync.stderr)")
        #expect(try await s.status()["state"] as? String == "trial")

        let read = try await s.tool(["busctl", "--address=\(s.bus.address)", "get-property", "org.offlineagent.Agent1", mall,
                                     DBusServiceTests.appInterface, "ActiveVersion"], user: Self.nobody)
        #expect(read.stdout == "s \"1.1.0\"\n", "\(read.stderr)")
        let resolve = try await Self.gdbus(s, mall, "org.offlineagent.Agent1.App.Resolve", [SyncHarness.whitelist + "index.html"])
        #expect(resolve.status == 0 && resolve.stdout.contains("'1.1.0', '')"), "\(resolve.stdout) \(resolve.stderr)")
        let file = try await Self.gdbus(s, mall, "org.offlineagent.Agent1.App.ResolveFile", [SyncHarness.whitelist + "index.html"])
        #expect(file.status == 0 && file.stdout.contains("'text/html; charset=utf-8', '1.1.0')"), "\(file.stdout) \(file.stderr)")

        // Root passes the policy: the same call confirms.
        #expect(try await s.call("Confirm", "s", ["1.1.0"])["ok"] != nil)
        #expect(try await s.status()["state"] as? String == "good")
    }

    @Test("without a bus policy, the service allows an app's configured users only")
    func serviceCheck() async throws {
        let shop: (SyncHarness) async throws -> Void = { h in
            h.origin.setManifest(h.full("1.0.0", ["app": "shop", "whitelist": ["https://shop.example.com/"]]))
            let installed = try await CLI.run(["sync", "--allow-unsigned", "--root", h.root.path, "--app", "shop",
                                               "--manifest", h.origin.manifestURL.absoluteString, "--force"])
            #expect(installed.status == 0, "\(installed.stderr)")
        }
        let s = try await Setup(users: ["\(Self.nobody)"], extraApps: [["app": "shop", "manifest": "https://shop.example.com/manifest"]], prepare: shop)
        let refused = try await Self.gdbus(s, "/org/offlineagent/Agent1/app/shop", "org.offlineagent.Agent1.App.Confirm", ["1.0.0"])
        #expect(refused.status != 0 && refused.stderr.contains("org.freedesktop.DBus.Error.AccessDenied") && refused.stderr.contains("may not change shop"),
                "\(refused.stderr)")
        let allowed = try await Self.gdbus(s, DBusServiceTests.mallPath, "org.offlineagent.Agent1.App.Confirm", ["1.0.0"])
        #expect(allowed.status == 0, "\(allowed.stderr)")
    }
}
