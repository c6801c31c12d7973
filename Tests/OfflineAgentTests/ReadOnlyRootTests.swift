import Foundation
import Testing
import TestSupport

/// Commands other than `sync` never create a root: a missing one (a typo, a disk not
/// mounted) is one clear line naming the argument's phase (usage, exit 64; `serve` for
/// serve, exit 1), never `install`, and nothing appears on disk.
@Suite("Missing roots")
struct ReadOnlyRootTests {
    static let commands: [[String]] = [
        ["status"],
        ["status", "--app", "mall", "--json"],
        ["resolve", "https://h5.example.com/mall/index.html"],
        ["cookies"],
        ["serve", "--port", "0"],
        ["history", "--app", "mall"],
        ["mark-good", "--app", "mall"],
        ["mark-bad", "--app", "mall"],
        ["hold", "--app", "mall"],
        ["unhold", "--app", "mall"],
        ["rollback", "--app", "mall"],
        ["forget-bad", "--app", "mall"],
    ]

    @Test("a command on a root that does not exist says so in its own phase and creates nothing", arguments: commands)
    func missingRoot(_ command: [String]) async throws {
        let dir = TemporaryDirectory("missing-root")
        let root = dir.file("nowhere/agent")
        let result = try await CLI.run([command[0], "--root", root] + command.dropFirst())
        let phase = command[0] == "serve" ? "serve" : "usage"
        #expect(result.status == (phase == "serve" ? 1 : 64), "\(command): \(result.stderr)")
        #expect(result.stderr == "offline-agent: \(phase): no agent root there: nothing was synced to it (check --root, or run offline-agent sync --root with this path first) (\(root))\n")
        #expect(!FileManager.default.fileExists(atPath: dir.file("nowhere")))
    }

    @Test("check-config says which app is held, without creating a missing root")
    func checkConfigHeld() async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        #expect(try await CLI.run(["hold", "--root", h.root.path, "--app", "mall"]).status == 0)
        let file = h.root.file("agent.json")
        func write(root: String) throws {
            let config: [String: Any] = [
                "root": root, "allowUnsigned": true,
                "apps": [["app": "mall", "manifest": "http://127.0.0.1:9/m"], ["app": "help", "manifest": "http://127.0.0.1:9/h"]],
            ]
            try JSONSerialization.data(withJSONObject: config).write(to: URL(fileURLWithPath: file))
        }
        try write(root: h.root.path)
        let held = try await CLI.run(["check-config", file])
        #expect(held.status == 0, "\(held.stderr)")
        #expect(held.stdout.contains("mall: manifest http://127.0.0.1:9/m\n  keys: unsigned\n  profile: default\n  network: auto\n  held: yes"), "\(held.stdout)")
        #expect(held.stdout.contains("help: manifest http://127.0.0.1:9/h\n  keys: unsigned\n  profile: default\n  network: auto\n  held: no"), "\(held.stdout)")
        let missing = h.root.file("not-yet")
        try write(root: missing)
        let fresh = try await CLI.run(["check-config", file])
        #expect(fresh.status == 0 && fresh.stdout.contains("  held: no"), "\(fresh.stderr)")
        #expect(!FileManager.default.fileExists(atPath: missing))
    }
}
