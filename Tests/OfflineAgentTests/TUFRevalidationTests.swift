import Foundation
import Testing
@testable import OfflineAgent
import OfflinePublish
import TestSupport

/// What a `--trusted-root` check that finds nothing new costs (issue 37's target: the
/// next root's 404 and `timestamp.json`, revalidated by its ETag), against nginx serving
/// a publish directory, and what a 304 can and cannot do: it stands for the trusted
/// timestamp as kept, so a CDN answering 304 wrongly delays a release at most until that
/// timestamp expires, and never makes the device take older metadata.
@Suite("TUF revalidation (nginx)", .serialized)
struct TUFRevalidationTests {
    typealias F = PublishFixtures
    typealias FakeClock = ClockSkewTests.FakeClock

    /// A publish directory served by nginx (`server` its `server {}` body, `{publish}`
    /// standing for the directory), and an in-process agent on a fake clock.
    final class Scene: @unchecked Sendable {
        let dir = TemporaryDirectory("tuf-revalidation")
        let key = SigningKey.generate()
        let clock = FakeClock(Date())
        let nginx: Nginx
        let agent: Agent
        var out: String { dir.file("publish") }
        var timestampPath: String { "\(out)/metadata/timestamp.json" }

        init(server: String = "root {publish};") async throws {
            nginx = try await Nginx(server: server.replacingOccurrences(of: "{publish}", with: dir.file("publish")))
            var configuration = AgentConfiguration()
            let clock = clock
            configuration.clock = { clock.now }
            agent = Agent(root: URL(fileURLWithPath: dir.file("device")), configuration: configuration)
        }

        func publish(_ version: String) throws {
            _ = try Publisher.publish(PublishOptions(
                app: "mall", version: Version(version)!, sourceDirectory: F.sampleApp(version), publishDirectory: out,
                whitelist: ["https://h5.example.com/mall/"], signingKey: key))
        }

        /// Dates `timestamp.json` an hour back: nginx's ETag (modification second and
        /// size) is then settled, and the client keeps it.
        func settleTimestamp() throws {
            try FileManager.default.setAttributes([.modificationDate: Date().addingTimeInterval(-3600)], ofItemAtPath: timestampPath)
        }

        func sync() async throws -> SyncReport {
            var options = SyncOptions()
            options.force = true
            options.trustedRoot = try Data(contentsOf: URL(fileURLWithPath: "\(out)/metadata/1.root.json"))
            return await agent.sync(app: "mall", manifest: URL(string: "\(nginx.baseURL)/mall/manifest.json")!, options: options)
        }

        func installed() async throws -> Version? { try await agent.status(app: "mall").first?.installed?.version }

        /// The requests nginx logged from the `from`th on.
        func requests(from: Int) -> [Nginx.LogLine] { Array(nginx.accessLog().dropFirst(from)) }

        deinit { nginx.stop() }
    }

    static func started(server: String = "root {publish};") async throws -> Scene? {
        if let missing = Nginx.missing { Issue.record(Comment(rawValue: "skipped: \(missing)")); return nil }
        return try await Scene(server: server)
    }

    @Test("a check that finds nothing new is the next root's 404 and timestamp.json's 304, no manifest; a publish is fetched")
    func noOpIsTwoSmallRequests() async throws {
        guard let scene = try await Self.started() else { return }
        try scene.publish("1.0.0")
        try scene.settleTimestamp()
        var report = try await scene.sync()
        #expect(report.result == .updated, "\(report.error?.description ?? "")")

        var seen = scene.nginx.accessLog().count
        report = try await scene.sync()
        #expect(report.result == .upToDate, "\(report.error?.description ?? "")")
        var requests = scene.requests(from: seen)
        #expect(requests.map(\.path) == ["/metadata/2.root.json", "/metadata/timestamp.json"], "\(requests)")
        #expect(requests.map(\.status) == [404, 304], "\(requests)")
        #expect(requests.last?.ifNoneMatch.isEmpty == false, "\(requests)")
        #expect(requests.last?.bytesSent == 0, "no body: \(requests)")

        // A release rewrites timestamp.json: a new ETag, so a 200, then the new manifest.
        try scene.publish("1.1.0")
        seen = scene.nginx.accessLog().count
        report = try await scene.sync()
        #expect(report.result == .updated && report.version == Version("1.1.0"), "\(report.error?.description ?? "")")
        requests = scene.requests(from: seen)
        #expect(requests.contains { $0.path == "/metadata/timestamp.json" && $0.status == 200 }, "\(requests)")
        #expect(requests.contains { $0.path.hasPrefix("/mall/") && $0.path.hasSuffix(".manifest.json") && $0.status == 200 }, "\(requests)")
    }

    @Test("a CDN answering 304 to every revalidation keeps the trusted timestamp until it expires, then the release is taken")
    func stale304IsBoundedByExpiry() async throws {
        // The edge answers 304 whenever asked If-None-Match, whatever the origin holds.
        let server = """
            root {publish};
            location = /metadata/timestamp.json { if ($http_if_none_match) { return 304; } }
            """
        guard let scene = try await Self.started(server: server) else { return }
        try scene.publish("1.0.0")
        let start = scene.clock.now
        _ = try TUFRepository.refreshTimestamp(publishDirectory: scene.out, key: scene.key, expires: start.addingTimeInterval(3600))
        try scene.settleTimestamp()
        var report = try await scene.sync()
        #expect(report.result == .updated, "\(report.error?.description ?? "")")

        try scene.publish("1.1.0")
        // The 304 is the trusted timestamp again: nothing new, nothing older, 1.0.0 serving.
        report = try await scene.sync()
        #expect(report.result == .upToDate, "\(report.result) \(report.error?.description ?? "")")
        #expect(try await scene.installed() == Version("1.0.0"))

        // Once the trusted timestamp has expired the client asks without If-None-Match.
        scene.clock.set(start.addingTimeInterval(7200))
        let seen = scene.nginx.accessLog().count
        report = try await scene.sync()
        #expect(report.result == .updated && report.version == Version("1.1.0"), "\(report.result) \(report.error?.description ?? "")")
        let timestamp = scene.requests(from: seen).filter { $0.path == "/metadata/timestamp.json" }
        #expect(timestamp.map(\.status) == [200] && timestamp.first?.ifNoneMatch.isEmpty == true, "\(timestamp)")
    }

    @Test("a 304 to a request without If-None-Match is refused (protocol-violation); nothing is installed")
    func unaskedNotModified() async throws {
        guard let scene = try await Self.started(server: "root {publish};\nlocation = /metadata/timestamp.json { return 304; }") else { return }
        try scene.publish("1.0.0")
        let report = try await scene.sync()
        #expect(report.result == .failed && report.error?.cause == .protocolViolation, "\(report.result) \(report.error?.description ?? "")")
        #expect(try await scene.installed() == nil)
    }

    @Test("a replayed older timestamp after a revalidation is still refused (metadata-replay)")
    func replayAfterRevalidation() async throws {
        guard let scene = try await Self.started() else { return }
        try scene.publish("1.0.0")
        let old = try Data(contentsOf: URL(fileURLWithPath: scene.timestampPath))
        try scene.publish("1.1.0")
        try scene.settleTimestamp()
        var report = try await scene.sync()
        #expect(report.result == .updated && report.version == Version("1.1.0"), "\(report.error?.description ?? "")")
        report = try await scene.sync()
        #expect(report.result == .upToDate, "\(report.error?.description ?? "")")
        // An edge serves the older timestamp (another ETag: a 200 with its bytes).
        try old.write(to: URL(fileURLWithPath: scene.timestampPath))
        report = try await scene.sync()
        #expect(report.result == .failed && report.error?.cause == .metadataReplay, "\(report.result) \(report.error?.description ?? "")")
        #expect(try await scene.installed() == Version("1.1.0"))
    }

    @Test("an ETag is kept only once the file is 2 s older than the answer (nginx's ETag is its modification second and size)")
    func settledETag() {
        let etag = "\"6569a1b2-2d4\"", served = "Sat, 28 Nov 2026 18:50:02 GMT"
        #expect(TUFClient.settledETag(etag, lastModified: nil, date: nil) == etag)
        #expect(TUFClient.settledETag(nil, lastModified: nil, date: served) == nil)
        #expect(TUFClient.settledETag(etag, lastModified: "Sat, 28 Nov 2026 18:50:00 GMT", date: served) == etag)
        #expect(TUFClient.settledETag(etag, lastModified: "Sat, 28 Nov 2026 18:50:01 GMT", date: served) == nil)
        #expect(TUFClient.settledETag(etag, lastModified: "Sat, 28 Nov 2026 18:50:09 GMT", date: served) == nil)
        #expect(TUFClient.settledETag(etag, lastModified: "Sat, 28 Nov 2026 18:50:00 GMT", date: nil) == nil)
        #expect(TUFClient.settledETag(etag, lastModified: "yesterday", date: served) == etag)
    }
}
