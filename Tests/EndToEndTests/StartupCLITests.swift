import Foundation
import NIOCore
import Testing
import TestSupport

/// The device's start-up paths: `sync` parsed on its own (the throttled no-op cron runs
/// every minute) must read exactly like the full parser, and `serve` runs two event loops.
@Suite("start-up")
struct StartupCLITests {
    @Test("sync --help, and usage errors, read as through the full parser", arguments: [
        ["sync", "--help"],
        ["sync", "--root", "/nonexistent"],                       // validate(): --app and --manifest missing
        ["sync", "--root", "/r", "--app", "a", "--manifest", "http://x/", "--bogus"],
        ["sync", "--root", "/r", "--app", "a", "--manifest", "http://x/", "--max-trial-launches", "-1"],
    ])
    func syncParsesLikeTheRootCommand(_ arguments: [String]) async throws {
        let result = try await CLI.run(arguments)
        let text = result.stdout + result.stderr
        // sync parsed as its own root would name itself "sync", not "offline-agent sync".
        #expect(text.contains("offline-agent sync"), "\(text)")
        #expect(!text.contains("\nUSAGE: sync") && !text.hasPrefix("Usage: sync") && !text.contains("\nUsage: sync"), "\(text)")
        #expect(result.status == (arguments.contains("--help") ? 0 : 64), "\(text)")
    }

    @Test("sync --help prints what help sync prints")
    func syncHelpMatches() async throws {
        let direct = try await CLI.run(["sync", "--help"])
        let viaHelp = try await CLI.run(["help", "sync"])
        #expect(direct.status == 0)
        #expect(direct.stdout == viaHelp.stdout)
    }

    @Test("a throttled sync through the short path reports and exits as before")
    func throttledSync() async throws {
        let h = try SyncHarness()
        h.origin.setManifest(h.full("1.0.0"))
        let sync = ["sync", "--allow-unsigned", "--root", h.root.path, "--app", "mall", "--manifest", h.origin.manifestURL.absoluteString]
        #expect(try await CLI.run(sync + ["--force"]).status == 0)
        let requests = h.origin.requests.count
        let throttled = try await CLI.run(sync + ["--json"])
        #expect(throttled.status == 0)
        #expect(CLI.json(throttled.stdout)?["result"] as? String == "throttled", "\(throttled.stdout)")
        #expect(h.origin.requests.count == requests)
    }

    @Test("serve runs two NIO event loops (one on a single core), whatever the core count")
    func serveTwoEventLoops() async throws {
        let h = try SyncHarness()
        let running = try CLI.start(["serve", "--root", h.root.path, "--port", "0", "--device-id", "d"])
        defer { CLI.terminateInBackground(running) }
        let line = await running.out.fileHandleForReading.availableLine()
        #expect(line.hasPrefix("listening on"), "\(line)")
        let pid = running.process.processIdentifier
        let names = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task").map { task in
            (try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/comm", encoding: .utf8))?
                .trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
        }
        // NIO names the singleton group's event loop threads NIO-SGLTN-<group>-#<n>
        // (other groups' NIO-ELT-…); by NIO's default, there would be one per core.
        #expect(names.filter { $0.hasPrefix("NIO-SGLTN") || $0.hasPrefix("NIO-ELT") }.count == min(2, System.coreCount), "\(names)")
    }
}
