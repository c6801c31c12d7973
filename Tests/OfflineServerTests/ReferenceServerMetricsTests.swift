import Foundation
import OfflineServer
import Testing
@testable import OfflineAgent
import TestSupport
import OfflinePublish

/// `GET /metrics` of the reference server: manifests by result, files by kind and
/// status, bytes sent, errors; swift-metrics counters in a registry each server owns.
@Suite("ReferenceServer /metrics")
struct ReferenceServerMetricsTests {
    typealias F = PublishFixtures

    /// The four sample versions published (signed) into a fresh directory; removed after `body`.
    func withPublished(_ body: (_ out: String, _ key: SigningKey) async throws -> Void) async throws {
        let out = try F.temporaryDirectory("server-metrics")
        defer { F.cleanUp(out) }
        let key = SigningKey.generate()
        try F.publishSample(to: out, key: key)
        try await body(out, key)
    }

    func withServer(_ out: String, key: SigningKey, _ body: (RunningReferenceServer) async throws -> Void) async throws {
        let server = try await ReferenceServer(configuration: .init(directory: out, port: 0, signingKey: key)).start()
        do {
            try await body(server)
        } catch {
            await server.stop()
            throw error
        }
        await server.stop()
    }

    static func get(
        _ base: String, _ path: String, _ headers: [(String, String)] = [], method: String = "GET"
    ) async throws -> PublishHTTP.Response {
        try await PublishHTTP.fetch(base + path, method: method, headers: headers)
    }

    static func size(_ path: String) -> Int? {
        (try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? Int
    }

    /// Scrapes `/metrics` and parses it strictly (a malformed line fails the test).
    static func scrape(_ server: RunningReferenceServer) async throws -> PrometheusExposition {
        let response = try await PublishHTTP.fetch(server.baseURL + "/metrics")
        #expect(response.status == 200)
        #expect(response.header("Content-Type") == "text/plain; version=0.0.4; charset=utf-8")
        return try PrometheusExposition(parsing: String(decoding: response.body, as: UTF8.self))
    }

    @Test("a scrape after real requests counts manifests, files by kind and status, bytes and errors")
    func countsRealRequests() async throws {
        let out = try F.temporaryDirectory("server-metrics")
        defer { F.cleanUp(out) }
        let key = SigningKey.generate()
        try F.publishSample(to: out, key: key)
        let server = try await ReferenceServer(configuration: .init(directory: out, port: 0, signingKey: key)).start()
        do {
            try await Self.exercise(server)
        } catch {
            await server.stop()
            throw error
        }
        await server.stop()
    }

    /// The requests of `countsRealRequests` and the checks of what they counted.
    static func exercise(_ server: RunningReferenceServer) async throws {
        let base = server.baseURL
        var bytes: [String: Int] = [:]

        let manifest = try await Self.get(base, "/manifest?app=sample&current=1.0.0")
        #expect(manifest.status == 200)
        let byPath = try await Self.get(base, "/sample/manifest?current=1.2.0")
        #expect(byPath.status == 200)
        bytes["manifest", default: 0] += manifest.body.count + byPath.body.count
        let etag = try #require(manifest.header("ETag"))
        let r1 = try await Self.get(base, "/manifest?app=sample&current=1.0.0", [("If-None-Match", etag)])
        #expect(r1.status == 304)

        let patch = try await Self.get(base, "/sample/1.0.0-1.3.0.bsdiff")
        #expect(patch.status == 200 && !patch.body.isEmpty)
        let part = try await Self.get(base, "/sample/1.0.0-1.3.0.bsdiff", [("Range", "bytes=0-99")])
        #expect(part.status == 206 && part.body.count == 100)
        bytes["patch", default: 0] += patch.body.count + part.body.count

        let full = try await Self.get(base, "/sample/1.3.0.zip.gz")
        #expect(full.status == 200 && !full.body.isEmpty)
        let plain = try await Self.get(base, "/sample/1.3.0.zip")
        #expect(plain.status == 200 && !plain.body.isEmpty)
        bytes["full", default: 0] += full.body.count + plain.body.count
        // HEAD sends no body bytes; a matching ETag sends none either.
        let r2 = try await Self.get(base, "/sample/1.3.0.zip.gz", method: "HEAD")
        #expect(r2.status == 200)
        let fullTag = try #require(full.header("ETag"))
        let r3 = try await Self.get(base, "/sample/1.3.0.zip.gz", [("If-None-Match", fullTag)])
        #expect(r3.status == 304)

        let staticManifest = try await Self.get(base, "/sample/manifest.json")
        let sig = try await Self.get(base, "/sample/manifest.json.sig")
        #expect(staticManifest.status == 200 && sig.status == 200)
        bytes["manifest", default: 0] += staticManifest.body.count
        bytes["sig", default: 0] += sig.body.count
        let r4 = try await Self.get(base, "/sample/manifest.json.sig", [("Range", "bytes=99999-")])
        #expect(r4.status == 416)

        // Errors: unknown file of a servable kind, a name never served, bad and unknown apps, a POST.
        let r5 = try await Self.get(base, "/sample/9.9.9.zip")
        #expect(r5.status == 404)
        let r6 = try await Self.get(base, "/sample/state.json")
        #expect(r6.status == 404)
        let r7 = try await Self.get(base, "/manifest?app=nope")
        #expect(r7.status == 404)
        let r8 = try await Self.get(base, "/manifest?app=sample&current=x")
        #expect(r8.status == 400)
        let r9 = try await Self.get(base, "/manifest?app=sample", method: "POST")
        #expect(r9.status == 405)

        let scraped = try await Self.scrape(server)
        let expected: [(String, [String: String], Double)] = [
            ("offline_server_manifests_total", ["code": "200"], 2),
            ("offline_server_manifests_total", ["code": "304"], 1),
            ("offline_server_file_responses_total", ["kind": "patch", "code": "200"], 1),
            ("offline_server_file_responses_total", ["kind": "patch", "code": "206"], 1),
            ("offline_server_file_responses_total", ["kind": "full", "code": "200"], 3),
            ("offline_server_file_responses_total", ["kind": "full", "code": "304"], 1),
            ("offline_server_file_responses_total", ["kind": "full", "code": "404"], 1),
            ("offline_server_file_responses_total", ["kind": "manifest", "code": "200"], 1),
            ("offline_server_file_responses_total", ["kind": "sig", "code": "200"], 1),
            ("offline_server_file_responses_total", ["kind": "sig", "code": "416"], 1),
            ("offline_server_sent_bytes_total", ["kind": "manifest"], Double(bytes["manifest"]!)),
            ("offline_server_sent_bytes_total", ["kind": "patch"], Double(bytes["patch"]!)),
            ("offline_server_sent_bytes_total", ["kind": "full"], Double(bytes["full"]!)),
            ("offline_server_sent_bytes_total", ["kind": "sig"], Double(bytes["sig"]!)),
            ("offline_server_errors_total", ["code": "400"], 1),
            ("offline_server_errors_total", ["code": "404"], 3),
            ("offline_server_errors_total", ["code": "405"], 1),
            ("offline_server_errors_total", ["code": "416"], 1),
            // A gauge per app of the publish directory, for its latest version: not halted.
            ("offline_server_rollout_halted", ["app": "sample", "version": "1.3.0"], 0),
        ]
        for (name, labels, value) in expected {
            #expect(scraped.value(name, labels) == value, "\(name) \(labels)")
        }
        #expect(scraped.samples.count == expected.count, "\(scraped.samples)")
        let families = Set(expected.map(\.0))
        #expect(Set(scraped.types.keys) == families)
        for family in families {
            #expect(scraped.types[family] == (family == "offline_server_rollout_halted" ? "gauge" : "counter"), "\(family)")
            #expect(scraped.help[family]?.isEmpty == false, "\(family)")
        }

        // The accessors read the same registry.
        let m = server.metrics
        #expect(m.manifests(code: 200) == 2 && m.manifests(code: 304) == 1)
        #expect(m.fileResponses(.patch, code: 206) == 1)
        #expect(m.sentBytes(.full) == bytes["full"]!)
        #expect(m.errors(code: 404) == 3)

        // HEAD /metrics: the headers only.
        let head = try await Self.get(base, "/metrics", method: "HEAD")
        #expect(head.status == 200 && head.body.isEmpty)
    }

    @Test("an agent's syncs show as manifests, one full package, one patch and their bytes")
    func agentSyncsCounted() async throws {
        let out = try F.temporaryDirectory("server-metrics-agent")
        defer { F.cleanUp(out) }
        let key = SigningKey.generate()
        try F.publishSample(["1.0.0", "1.1.0"], to: out, key: key)
        try await withServer(out, key: key) { server in
            let options = SyncOptions(force: true, publicKey: key.publicKeyBase64)
            let manifestURL = URL(string: "\(server.baseURL)/manifest")!
            let agent = Agent(root: URL(fileURLWithPath: "\(out)/agent"), configuration: SyncHarness.hangBounds())
            let first = await agent.sync(app: "sample", manifest: manifestURL, options: options)
            #expect(first.result == .updated && first.via == .full, "\(String(describing: first.error))")
            try F.publishSample(["1.2.0"], to: out, key: key)
            let second = await agent.sync(app: "sample", manifest: manifestURL, options: options)
            #expect(second.result == .updated && second.via == .patch, "\(String(describing: second.error))")
            let third = await agent.sync(app: "sample", manifest: manifestURL, options: options)
            #expect(third.result == .upToDate)

            let scraped = try await Self.scrape(server)
            // The third may be a 304 (the agent sends the ETag it kept); each sync asked once.
            let answered = (scraped.value("offline_server_manifests_total", ["code": "200"]) ?? 0)
                + (scraped.value("offline_server_manifests_total", ["code": "304"]) ?? 0)
            #expect(answered == 3)
            #expect(scraped.value("offline_server_file_responses_total", ["kind": "full", "code": "200"]) == 1)
            #expect(scraped.value("offline_server_file_responses_total", ["kind": "patch", "code": "200"]) == 1)
            let full = try #require(scraped.value("offline_server_sent_bytes_total", ["kind": "full"]))
            let patch = try #require(scraped.value("offline_server_sent_bytes_total", ["kind": "patch"]))
            #expect(Int(full) == Self.size("\(out)/sample/1.1.0.zip.gz"))
            #expect(Int(patch) == Self.size("\(out)/sample/1.1.0-1.2.0.bsdiff"))
            #expect(Int64(full) + Int64(patch) == first.bytesDownloaded + second.bytesDownloaded)
            #expect(scraped.types["offline_server_errors_total"] == nil, "no error response")
        }
    }

    @Test("two servers in one process keep separate counts")
    func separateRegistries() async throws {
        try await withPublished { out, key in
            try await withServer(out, key: key) { first in
                try await withServer(out, key: key) { second in
                    for _ in 0..<2 { _ = try await PublishHTTP.fetch(first.baseURL + "/manifest?app=sample") }
                    _ = try await PublishHTTP.fetch(second.baseURL + "/sample/manifest.json.sig")
                    _ = try await PublishHTTP.fetch(second.baseURL + "/nope/x.zip")

                    let one = try await Self.scrape(first), two = try await Self.scrape(second)
                    #expect(one.value("offline_server_manifests_total", ["code": "200"]) == 2)
                    #expect(two.value("offline_server_manifests_total", ["code": "200"]) == 0)
                    #expect(one.value("offline_server_file_responses_total", ["kind": "sig", "code": "200"]) == nil)
                    #expect(two.value("offline_server_file_responses_total", ["kind": "sig", "code": "200"]) == 1)
                    #expect(one.value("offline_server_errors_total", ["code": "404"]) == nil)
                    #expect(two.value("offline_server_errors_total", ["code": "404"]) == 1)
                    #expect(first.metrics.manifests(code: 200) == 2 && second.metrics.manifests(code: 200) == 0)
                }
            }
        }
    }
}
