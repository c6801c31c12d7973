import Foundation
import Testing
@testable import OfflineAgent
import TestSupport

/// What `offline-agent sync` prints: one line per app on stderr (no logger line beside
/// it), logs only with `--verbose`, busy as a plain line, and `--config` apps checked
/// concurrently with their lines in the file's order.
@Suite("CLI output")
struct CLIOutputTests {
    struct Failure: CustomTestStringConvertible, Sendable {
        var label: String
        /// Sets the origin up to fail; returns the manifest URL to sync from.
        var setUp: @Sendable (SyncHarness) async throws -> String
        /// A fragment of the one line.
        var reason: String
        var testDescription: String { label }
    }

    static let failures: [Failure] = [
        Failure(label: "connection refused", setUp: { _ in
            "http://127.0.0.1:\(try TrickleServer.deadPort())/manifest"
        }, reason: "connection refused by 127.0.0.1:"),
        Failure(label: "manifest 500", setUp: { h in
            h.origin.setManifestReply { _ in .status(500) }
            return h.origin.manifestURL.absoluteString
        }, reason: "server answered 500"),
        Failure(label: "304 nobody asked for", setUp: { h in
            h.origin.setManifestReply { _ in .status(304) }
            return h.origin.manifestURL.absoluteString
        }, reason: "304"),
        Failure(label: "package hash mismatch", setUp: { h in
            let zeros = String(repeating: "0", count: 64)
            h.origin.setManifest(h.full("1.0.0", ["sha256": zeros, "packageSha256": zeros]))
            return h.origin.manifestURL.absoluteString
        }, reason: "mall: failed: download"),
        Failure(label: "patch unusable, then the full package missing", setUp: { h in
            try await h.install("1.0.0")
            h.origin.setManifest(try h.patch(from: "1.0.0", to: "1.1.0", ["sha256": String(repeating: "0", count: 64)]))
            h.origin.override("1.1.0.zip") { _, _ in .status(404) }
            return h.origin.manifestURL.absoluteString
        }, reason: "404"),
    ]

    static func lines(_ text: String) -> [Substring] { text.split(separator: "\n") }

    @Test("a failed sync prints exactly one line on stderr; --verbose adds logs", arguments: failures)
    func oneLine(_ failure: Failure) async throws {
        let h = try SyncHarness()
        let url = try await failure.setUp(h)
        let sync = ["sync", "--allow-unsigned", "--root", h.root.path, "--app", "mall", "--manifest", url, "--force"]
        let quiet = try await CLI.run(sync)
        #expect(quiet.status == 1)
        #expect(quiet.stdout.isEmpty)
        let lines = Self.lines(quiet.stderr)
        #expect(lines.count == 1, "\(quiet.stderr)")
        #expect(lines.first?.hasPrefix("mall: failed: ") == true, "\(quiet.stderr)")
        #expect(lines.first?.contains(failure.reason) == true, "\(quiet.stderr)")

        let verbose = try await CLI.run(sync + ["--verbose"])
        #expect(verbose.status == 1)
        let verboseLines = Self.lines(verbose.stderr)
        #expect(verboseLines.count > 1, "\(verbose.stderr)")
        // The same summary (the backoff's next-check time aside) ends the verbose output.
        func summary(_ line: Substring?) -> Substring? { line.map { $0.prefix { $0 != ";" } } }
        #expect(summary(verboseLines.last) == summary(lines.first))
    }

    @Test("--json on failure: one object on stdout, nothing on stderr")
    func jsonFailure() async throws {
        let h = try SyncHarness()
        let port = try TrickleServer.deadPort()
        let result = try await CLI.run(["sync", "--allow-unsigned", "--root", h.root.path, "--app", "mall", "--manifest", "http://127.0.0.1:\(port)/m", "--json"])
        #expect(result.status == 1)
        #expect(result.stderr.isEmpty, "\(result.stderr)")
        #expect(Self.lines(result.stdout).count == 1)
        let json = try #require(CLI.json(result.stdout))
        #expect(json["errorCode"] as? String == "network")
        #expect(json["phase"] as? String == "manifest")
    }

    @Test("a busy root exits 75 with one plain line, not an error log")
    func busy() async throws {
        let h = try SyncHarness()
        h.origin.setManifest(h.full("1.0.0"))
        try FileManager.default.createDirectory(atPath: h.root.path, withIntermediateDirectories: true)
        let held = try RootLock(root: h.root.path)
        defer { withExtendedLifetime(held) {} }
        let result = try await CLI.run(["sync", "--allow-unsigned", "--root", h.root.path, "--app", "mall", "--manifest", h.origin.manifestURL.absoluteString, "--force"])
        #expect(result.status == 75)
        let lines = Self.lines(result.stderr)
        #expect(lines.count == 1, "\(result.stderr)")
        #expect(lines.first?.hasPrefix("mall: busy") == true, "\(result.stderr)")
        #expect(!result.stderr.contains("error"))
        #expect(!result.stderr.contains("failed"))
    }

    @Test("sync --config checks its apps 4 at a time; lines keep the file's order")
    func configConcurrency() async throws {
        // Each manifest request is held until four connections have been open together (or
        // 60 s pass: a bound on a hang, not a speed; once four met, later requests go on at once).
        let server = try TrickleServer { target in
            if target.contains("app=ok") { return [.send(TrickleServer.head(500, length: 0))] }
            return [.waitForPeers(4, timeout: 60), .send(TrickleServer.head(503, length: 0, headers: [("Retry-After", "60")])), .sleep(0.5)]
        }
        defer { server.stop() }
        let root = TemporaryDirectory("root")
        let apps = ["d1", "d2", "ok", "d3", "d4", "d5", "d6"]
        let config: [String: Any] = [
            "root": root.path, "allowUnsigned": true,
            "apps": apps.map { ["app": $0, "manifest": "\(server.baseURL)/manifest"] },
        ]
        let file = root.file("agent.json")
        try JSONSerialization.data(withJSONObject: config).write(to: URL(fileURLWithPath: file))
        let result = try await CLI.run(["sync", "--config", file, "--force"])
        #expect(result.status == 1, "\(result.stderr)")
        let lines = Self.lines(result.stderr)
        #expect(lines.map { String($0.prefix { $0 != ":" }) } == apps, "\(result.stderr)")
        #expect(lines.filter { $0.contains(": throttled (the server asked to wait (Retry-After)), next check") && $0.hasSuffix("; --force checks now") }.count == 6, "\(result.stderr)")
        #expect(lines[2].hasPrefix("ok: failed: manifest: server answered 500"))
        #expect(server.maxConcurrent == 4)
        #expect(server.requests.count == apps.count)
    }
}
