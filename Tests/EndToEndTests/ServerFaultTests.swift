import Foundation
import Testing
@testable import OfflineAgent
import OfflinePublish
import TestSupport

/// `offline-server --fault`: a real server process with each fault and a real
/// `offline-agent sync` through it. Every failure leaves 1.0.0 installed byte for byte;
/// a fault limited to its first request (`*1`) is recovered from by the next sync.
@Suite("offline-server --fault", .serialized)
struct ServerFaultTests {
    typealias F = PublishFixtures

    /// A device with 1.0.0 installed (from a healthy server) and 1.1.0 published, so the
    /// next sync offers the patch `1.0.0-1.1.0.bsdiff` (and the full package as fallback).
    /// `big.bin` differs between the versions, so both files are a few hundred KiB.
    struct World {
        let dir: TemporaryDirectory
        let out: String
        let v1: String
        let v2: String
        let root: String
        let server: String

        init(_ label: String) async throws {
            server = try #require(F.builtExecutable("offline-server"))
            dir = TemporaryDirectory("fault-\(label)")
            out = dir.file("publish")
            root = dir.file("device")
            v1 = try StaticCDNTests.source("1.0.0", in: dir.path, name: "1.0.0", bigBytes: 256 << 10, seed: 1)
            v2 = try StaticCDNTests.source("1.1.0", in: dir.path, name: "1.1.0", bigBytes: 256 << 10, seed: 2)
            try StaticCDNTests.publish(v1, version: "1.0.0", out: out, key: nil)
            let healthy = try await OfflineServerProcess(arguments: ["--dir", out])
            defer { healthy.stopInBackground() }
            let first = try await Self.sync(root: root, manifest: "http://127.0.0.1:\(healthy.port)/manifest")
            #expect(first["result"] as? String == "updated", "\(first)")
            try StaticCDNTests.publish(v2, version: "1.1.0", out: out, key: nil)
        }

        /// Starts `offline-server` over the publish directory with these `--fault` specs.
        func serve(_ faults: [String]) async throws -> OfflineServerProcess {
            try await OfflineServerProcess(arguments: ["--dir", out] + faults.flatMap { ["--fault", $0] })
        }

        func size(_ name: String) -> Int { Int(FileSystem.fileSize("\(out)/sample/\(name)") ?? -1) }

        static func sync(root: String, manifest: String, force: Bool = true) async throws -> [String: Any] {
            let result = try await CLI.run(
                ["sync", "--allow-unsigned", "--root", root, "--app", "sample", "--manifest", manifest, "--json"] + (force ? ["--force"] : []))
            return CLI.json(result.stdout) ?? ["stderr": result.stderr, "status": Int(result.status)]
        }
    }

    /// The server's `offline_server_faults_total` for one fault and scope, as scraped.
    static func faults(_ server: OfflineServerProcess, _ fault: String, _ scope: String) async throws -> Double {
        let metrics = try await PublishHTTP.fetch(server.baseURL + "/metrics")
        let exposition = try PrometheusExposition(parsing: String(decoding: metrics.body, as: UTF8.self))
        return exposition.value("offline_server_faults_total", ["fault": fault, "scope": scope]) ?? 0
    }

    static func manifestURL(_ server: OfflineServerProcess) -> String { server.manifestURL }

    // MARK: Failures, then recovery

    struct Broken: CustomTestStringConvertible, Sendable {
        var faults: [String]
        /// `errorCode` of the failed sync.
        var cause: String
        /// The scopes whose counter must show one injection.
        var injected: [(fault: String, scope: String)]
        /// Whether a second sync, once the `*1` counts are spent, installs 1.1.0.
        var recovers: Bool
        var testDescription: String { faults.joined(separator: " ") }
    }

    static let broken: [Broken] = [
        // Both ways to 1.1.0 cut half way by an orderly close: a body short of its Content-Length.
        Broken(faults: ["truncate=0.5@patch*1", "truncate=0.5@package*1"], cause: "protocol-violation",
               injected: [("truncate", "patch"), ("truncate", "package")], recovers: true),
        // ... and by a TCP reset.
        Broken(faults: ["reset-after=64k@patch*1", "reset-after=64k@package*1"], cause: "network",
               injected: [("reset-after", "patch"), ("reset-after", "package")], recovers: true),
        Broken(faults: ["status=404@patch*1", "status=500@package*1"], cause: "http-status",
               injected: [("status", "patch"), ("status", "package")], recovers: true),
        Broken(faults: ["status=503@manifest*1"], cause: "manifest-unavailable",
               injected: [("status", "manifest")], recovers: true),
        Broken(faults: ["corrupt=manifest*1"], cause: "manifest-invalid",
               injected: [("corrupt", "manifest")], recovers: true),
        // Both files fail their hash: the package is remembered as refused, so no recovery here.
        Broken(faults: ["corrupt=patch", "corrupt=package"], cause: "hash-mismatch",
               injected: [("corrupt", "patch"), ("corrupt", "package")], recovers: false),
    ]

    @Test("a fault fails the sync with its cause, keeps 1.0.0 byte for byte, and the next sync recovers", arguments: broken)
    func failsThenRecovers(_ broken: Broken) async throws {
        let world = try await World("broken")
        let server = try await world.serve(broken.faults)
        defer { server.stopInBackground() }
        let failed = try await World.sync(root: world.root, manifest: Self.manifestURL(server))
        #expect(failed["result"] as? String == "failed", "\(failed)")
        #expect(failed["errorCode"] as? String == broken.cause, "\(failed)")
        try StaticCDNTests.expectInstalled(world.v1, version: "1.0.0", root: world.root)
        for (fault, scope) in broken.injected {
            #expect(try await Self.faults(server, fault, scope) == 1, "\(fault)@\(scope)")
        }
        guard broken.recovers else { return }
        let recovered = try await World.sync(root: world.root, manifest: Self.manifestURL(server))
        #expect(recovered["result"] as? String == "updated", "\(recovered)")
        try StaticCDNTests.expectInstalled(world.v2, version: "1.1.0", root: world.root)
    }

    @Test("truncate: the next sync resumes the cut patch instead of downloading it again")
    func truncateResumes() async throws {
        let world = try await World("resume")
        let server = try await world.serve(["truncate=0.5@patch*1", "truncate=0.5@package*1"])
        defer { server.stopInBackground() }
        let failed = try await World.sync(root: world.root, manifest: Self.manifestURL(server))
        #expect(failed["result"] as? String == "failed", "\(failed)")
        let resumed = try await World.sync(root: world.root, manifest: Self.manifestURL(server))
        #expect(resumed["result"] as? String == "updated" && resumed["via"] as? String == "patch", "\(resumed)")
        let patch = world.size("1.0.0-1.1.0.bsdiff")
        let downloaded = try #require(resumed["bytesDownloaded"] as? Int, "\(resumed)")
        #expect(patch > 64 << 10 && downloaded <= patch - patch / 2, "only the missing half: \(downloaded) of \(patch)")
        try StaticCDNTests.expectInstalled(world.v2, version: "1.1.0", root: world.root)
    }

    @Test("corrupt=patch alone: the hash refuses the patch and the full package installs 1.1.0")
    func corruptPatchFallsBack() async throws {
        let world = try await World("fallback")
        let server = try await world.serve(["corrupt=patch"])
        defer { server.stopInBackground() }
        let report = try await World.sync(root: world.root, manifest: Self.manifestURL(server))
        #expect(report["result"] as? String == "updated" && report["via"] as? String == "full", "\(report)")
        #expect(try await Self.faults(server, "corrupt", "patch") == 1)
        try StaticCDNTests.expectInstalled(world.v2, version: "1.1.0", root: world.root)
    }

    // MARK: Slow but healthy

    struct Slow: CustomTestStringConvertible, Sendable {
        var spec: String
        var fault: String
        var scope: String
        var seconds: Double
        var testDescription: String { spec }
    }

    @Test("latency and stall slow the exchange down by at least their duration; the sync still installs 1.1.0",
          arguments: [Slow(spec: "latency=400ms@manifest", fault: "latency", scope: "manifest", seconds: 0.4),
                      Slow(spec: "stall=1s@patch", fault: "stall", scope: "patch", seconds: 1.0)])
    func slow(_ slow: Slow) async throws {
        let (fault, scope, seconds) = (slow.fault, slow.scope, slow.seconds)
        let world = try await World("slow")
        let server = try await world.serve([slow.spec])
        defer { server.stopInBackground() }
        let started = Date()
        let report = try await World.sync(root: world.root, manifest: Self.manifestURL(server))
        let elapsed = Date().timeIntervalSince(started)
        #expect(report["result"] as? String == "updated" && report["via"] as? String == "patch", "\(report)")
        #expect(elapsed >= seconds, "the fault held the sync back: \(elapsed) s")
        #expect(try await Self.faults(server, fault, scope) == 1)
        try StaticCDNTests.expectInstalled(world.v2, version: "1.1.0", root: world.root)
    }

    // MARK: Retry-After

    @Test("status=503:retry-after=3600@manifest*1: the sync is throttled until the server's time, then recovers when forced")
    func retryAfterHonoured() async throws {
        let world = try await World("retry-after")
        let server = try await world.serve(["status=503:retry-after=3600@manifest*1"])
        defer { server.stopInBackground() }
        let asked = Date()
        let throttled = try await World.sync(root: world.root, manifest: Self.manifestURL(server))
        let answered = Date()
        #expect(throttled["result"] as? String == "throttled", "\(throttled)")
        let status = try await CLI.run(["status", "--root", world.root, "--app", "sample", "--json"])
        let nextText = try #require(CLI.json(status.stdout)?["nextCheck"] as? String, "\(status.stdout)")
        let next = try #require(RFC3339.date(from: nextText), "\(nextText)")
        // An hour, past the 5-minute throttle: the server's wish, not the agent's interval.
        // Bracketed by the clock around the sync (a second either side for RFC 3339's
        // whole seconds), so exact however long a loaded machine takes.
        let ahead = next.timeIntervalSince(asked)
        #expect(next >= asked.addingTimeInterval(3600 - 1) && next <= answered.addingTimeInterval(3600 + 1),
                "nextCheck \(next), \(ahead) s after the request")

        // An unforced sync keeps the server's wish: no request at all.
        let waiting = try await World.sync(root: world.root, manifest: Self.manifestURL(server), force: false)
        #expect(waiting["result"] as? String == "throttled", "\(waiting)")
        #expect(try await Self.faults(server, "status", "manifest") == 1)
        try StaticCDNTests.expectInstalled(world.v1, version: "1.0.0", root: world.root)

        let forced = try await World.sync(root: world.root, manifest: Self.manifestURL(server))
        #expect(forced["result"] as? String == "updated", "\(forced)")
        try StaticCDNTests.expectInstalled(world.v2, version: "1.1.0", root: world.root)
    }

    // MARK: Command line

    @Test("a bad --fault spec: one line naming it on stderr, exit 64, nothing served",
          arguments: ["status=200", "truncate=1", "corrupt=patch@package", "latency=5", "reset-after=-1", "stall=1s@cdn", "jitter=1s"])
    func badSpec(_ spec: String) async throws {
        let server = try #require(F.builtExecutable("offline-server"))
        let dir = TemporaryDirectory("fault-spec")
        let result = try await CLI.run(["--dir", dir.path, "--port", "0", "--fault", spec], executable: server)
        #expect(result.status == 64, "\(result)")
        #expect(result.stdout.isEmpty, "\(result.stdout)")
        let lines = result.stderr.split(separator: "\n")
        #expect(lines.count == 1 && lines[0].hasPrefix("offline-server: usage: --fault '\(spec)': "), "\(result.stderr)")
    }
}
