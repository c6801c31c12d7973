import Crypto
import Foundation
import Testing
@testable import OfflineAgent
import TestSupport

/// Slow and dead servers: every manifest exchange ends within its deadline with
/// `.timeout`, a server that cannot be reached fails at once with `.network` and a
/// readable reason, and the root's lock is free again afterwards.
@Suite("Deadlines and dead servers")
struct DeadlineTests {
    /// The manifest deadline these tests configure.
    static let deadline: Duration = .seconds(1)
    /// Not a speed: the `.timeout` cause already shows the deadline fired (a finished
    /// exchange installs, a server giving up fails otherwise). The bound only tells the
    /// deadline from waiting for the server: 120× the deadline, far below the scripts'
    /// 10-minute silences and their trickles of several minutes, so only a sync that
    /// waits for the server fails it, however loaded the machine.
    static let bound: Duration = .seconds(120)

    struct SlowServer: CustomTestStringConvertible, Sendable {
        var label: String
        /// Whether the sync requires a signature (so the agent fetches `.sig`).
        var signed = false
        /// The script for a request target, given the manifest body the origin would send.
        var script: @Sendable (_ target: String, _ body: [UInt8]) -> [TrickleServer.Step]
        var testDescription: String { label }
    }

    static let slowServers: [SlowServer] = [
        SlowServer(label: "status line trickled") { _, body in
            [.trickle(TrickleServer.head(length: body.count) + body, chunk: 1, pause: 0.5)]
        },
        SlowServer(label: "headers trickled") { _, body in
            let head = TrickleServer.head(length: body.count, headers: [("X-Padding", String(repeating: "p", count: 200))])
            return [.send(Array(head.prefix(16))), .trickle(Array(head.dropFirst(16)) + body, chunk: 1, pause: 0.5)]
        },
        SlowServer(label: "body trickled, each byte inside the read timeout") { _, body in
            [.send(TrickleServer.head(length: body.count)), .trickle(body, chunk: 1, pause: 0.5)]
        },
        SlowServer(label: "silent after the headers") { _, body in
            [.send(TrickleServer.head(length: body.count)), .send(Array(body.prefix(10))), .sleep(600)]
        },
        SlowServer(label: "silent before the status line") { _, _ in [.sleep(600)] },
        SlowServer(label: "slow redirect after slow redirect") { target, _ in
            [.sleep(0.4), .send(TrickleServer.head(302, length: 0, headers: [("Location", "/manifest?hop=\(target.count)")]))]
        },
        SlowServer(label: ".sig trickled", signed: true) { target, body in
            if target.hasPrefix("/manifest.sig") {
                let signature = Array(String(repeating: "A", count: 88).utf8)
                return [.send(TrickleServer.head(length: signature.count)), .trickle(signature, chunk: 1, pause: 2)]
            }
            return [.send(TrickleServer.head(length: body.count) + body)]
        },
    ]

    @Test("a slow manifest exchange fails with .timeout within the deadline and frees the lock", arguments: slowServers)
    func slowManifest(_ slow: SlowServer) async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        h.configuration.network.manifestTimeout = Self.deadline
        let body = try [UInt8](JSONSerialization.data(withJSONObject: h.full("1.1.0")))
        let server = try TrickleServer { target in slow.script(target, body) }
        defer { server.stop() }
        let key = Curve25519.Signing.PrivateKey().publicKey.rawRepresentation.base64EncodedString()
        let options = SyncOptions(force: true, publicKey: slow.signed ? key : nil)
        var report: SyncReport?
        let elapsed = await ContinuousClock().measure {
            report = await h.agent().sync(app: "mall", manifest: URL(string: "\(server.baseURL)/manifest")!, options: options)
        }
        let failed = try #require(report)
        #expect(failed.result == .failed)
        #expect(failed.error?.code == .manifest)
        #expect(failed.error?.cause == .timeout, "\(failed.error?.description ?? "no error")")
        #expect(elapsed < Self.bound, "took \(elapsed)")
        if slow.signed { #expect(server.requests.contains { $0.hasPrefix("/manifest.sig") }) }
        // The lock is free: another run takes it, and the next sync is not busy.
        #expect(throws: Never.self) { _ = try RootLock(root: h.root.path) }
        h.origin.setManifest(h.full("1.0.0"))
        let next = await h.sync()
        #expect(next.result == .upToDate, "\(next.error?.description ?? "")")
        #expect(h.activeMatches("1.0.0"))
    }

    struct DeadServer: CustomTestStringConvertible, Sendable {
        var label: String
        /// Prepares the unreachable endpoint; returns its port and what must stay alive meanwhile.
        var make: @Sendable () throws -> (port: Int, keep: [Int32], server: TrickleServer?)
        /// A fragment of the reason, with PORT replaced by the port.
        var reason: String
        /// Long, so a refusal retried until the connect timeout (the old behaviour) is
        /// told apart from an immediate one by a wide margin, even on two busy cores.
        var connectTimeout: Duration = .seconds(180)
        /// Not a speed: the behaviour is that a refusal is not retried until the connect
        /// timeout, so the bound sits far below that timeout (and, for the blackhole, 60×
        /// its 1 s timeout, below the kernel's 2-minute SYN retries) and far above any delay
        /// a loaded machine adds.
        var bound: Duration = .seconds(60)
        var testDescription: String { label }
    }

    static let deadServers: [DeadServer] = [
        DeadServer(label: "connection refused", make: { (try TrickleServer.deadPort(), [], nil) },
                   reason: "connection refused by 127.0.0.1:PORT"),
        DeadServer(label: "accept queue full: the handshake is never answered", make: {
            // A listener that never accepts, with its queue already full: the kernel drops
            // further SYNs, like a blackholed address.
            let (listener, port) = try TrickleServer.listen(backlog: 0)
            let fillers = (0..<3).map { _ in TrickleServer.connectAsync(to: port) }
            Thread.sleep(forTimeInterval: 0.2)  // blocking: the SYN queue fills, a moment
            return (port, [listener] + fillers, nil)
        }, reason: "no connection to 127.0.0.1:PORT", connectTimeout: .seconds(1)),
        DeadServer(label: "closed before answering", make: {
            let server = try TrickleServer { _ in [] }
            return (server.port, [], server)
        }, reason: "closed by 127.0.0.1:PORT"),
    ]

    @Test("an unreachable manifest server fails fast with .network and says who", arguments: deadServers)
    func deadManifestServer(_ dead: DeadServer) async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        h.configuration.network.connectTimeout = dead.connectTimeout
        let (port, keep, server) = try dead.make()
        defer {
            for fd in keep { close(fd) }
            server?.stop()
        }
        var report: SyncReport?
        let elapsed = await ContinuousClock().measure {
            report = await h.agent().sync(app: "mall", manifest: URL(string: "http://127.0.0.1:\(port)/manifest")!, options: SyncOptions(force: true))
        }
        let failed = try #require(report)
        #expect(failed.result == .failed)
        #expect(failed.error?.cause == .network, "\(failed.error?.description ?? "no error")")
        #expect(failed.error?.reason.contains(dead.reason.replacingOccurrences(of: "PORT", with: "\(port)")) == true,
                "\(failed.error?.description ?? "no error")")
        #expect(elapsed < dead.bound, "took \(elapsed)")
        #expect(h.activeMatches("1.0.0"))
        #expect(throws: Never.self) { _ = try RootLock(root: h.root.path) }
    }

    @Test("a refused package download fails fast with .network, the old version intact")
    func refusedDownload() async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        let port = try TrickleServer.deadPort()
        h.origin.setManifest(h.full("1.1.0", ["url": "http://127.0.0.1:\(port)/1.1.0.zip"]))
        // Bound below: a refusal is not retried until this timeout (not a speed; see DeadServer.bound).
        h.configuration.network.connectTimeout = .seconds(180)
        var report: SyncReport?
        let elapsed = await ContinuousClock().measure { report = await h.sync() }
        let failed = try #require(report)
        #expect(failed.error?.code == .download)
        #expect(failed.error?.cause == .network)
        #expect(failed.error?.reason.contains("connection refused by 127.0.0.1:\(port)") == true, "\(failed.error?.description ?? "")")
        #expect(elapsed < .seconds(60), "took \(elapsed)")
        #expect(h.activeMatches("1.0.0"))
    }

    @Test("a 304 to a request without If-None-Match is a protocol violation", arguments: [false, true])
    func unaskedNotModified(installed: Bool) async throws {
        let h = try SyncHarness()
        if installed { try await h.install("1.0.0") }
        h.origin.setManifestReply { _ in .status(304) }
        let report = await h.sync()
        #expect(report.result == .failed)
        #expect(report.error?.cause == .protocolViolation, "\(report.error?.description ?? "no error")")
        #expect(h.origin.requests(for: "/manifest").last?.header("If-None-Match") == nil)
        if installed { #expect(h.activeMatches("1.0.0")) }
    }

    @Test("batch: several apps run concurrently, at most `concurrency` at once, reports in order")
    func batchConcurrency() async throws {
        let h = try SyncHarness()
        // Each request is held until four connections have been open together (or 60 s pass:
        // a bound on a hang, not a speed; once four met, later requests go on at once).
        let server = try TrickleServer { _ in [.waitForPeers(4, timeout: 60), .send(TrickleServer.head(500, length: 0)), .sleep(0.5)] }
        defer { server.stop() }
        let apps = (1...6).map { "app\($0)" }
        let requests = apps.map { SyncRequest(app: $0, manifest: URL(string: "\(server.baseURL)/manifest")!, options: SyncOptions(force: true)) }
        let reports = await h.agent().sync(requests, concurrency: 4)
        #expect(reports.map(\.app) == apps)
        #expect(reports.allSatisfy { $0.error?.cause == .manifestUnavailable }, "\(reports.map { $0.error?.description ?? "" })")
        #expect(server.maxConcurrent == 4)
        #expect(server.requests.count == 6)
    }
}
