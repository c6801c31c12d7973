import Foundation
import Testing
@testable import OfflineAgent
import OfflinePublish
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// The agent against real static infrastructure: a publish directory served by
/// nginx as any CDN origin would serve it (no code of ours on the server side), and
/// nginx `proxy_cache` as a caching CDN in front of `offline-server`.
@Suite("Static CDN (nginx)", .serialized)
struct StaticCDNTests {
    typealias F = PublishFixtures

    /// The cache rules PROTOCOL.md gives for nginx: manifests short, versioned files immutable.
    /// Requests without `Range` are slowed to `rate` (0: not at all), so a test can kill a
    /// download half way; a resumed request runs at full speed.
    static func staticServer(root: String, rate: String = "0") -> (server: String, http: String) {
        let server = """
                    root \(root);
                    etag on;
                    limit_rate $first_rate;
                    location ~ \\.(zip|gz|bsdiff)$ {
                        add_header Cache-Control "public, max-age=31536000, immutable";
                    }
                    location ~ /manifest\\.json(\\.sig)?$ {
                        add_header Cache-Control "public, max-age=60";
                    }
            """
        let http = """
                map $http_range $first_rate { "" \(rate); default 0; }
            """
        return (server, http)
    }

    /// `offline-agent sync --json` for one device root.
    static func sync(root: String, manifest: String, key: SigningKey?, extra: [String] = []) async throws -> [String: Any] {
        var arguments = ["sync", "--allow-unsigned", "--root", root, "--app", "sample", "--manifest", manifest, "--force", "--json"] + extra
        if let key { arguments += ["--public-key", key.publicKeyBase64] }
        let result = try await CLI.run(arguments)
        return CLI.json(result.stdout) ?? ["stderr": result.stderr, "status": Int(result.status)]
    }

    /// The installed tree of `root` equals the source directory byte for byte.
    static func expectInstalled(
        _ source: String, version: String, root: String, app: String = "sample", sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let store = Store(root: root)
        let active = try #require(store.active(app), sourceLocation: sourceLocation)
        #expect(active.version == Version(version), sourceLocation: sourceLocation)
        let installed = F.tree(store.versionDirectory(app, active.version))
        let expected = F.tree(source)
        #expect(!expected.isEmpty, sourceLocation: sourceLocation)
        #expect(installed.keys.sorted() == expected.keys.sorted(), sourceLocation: sourceLocation)
        for (name, bytes) in expected where installed[name] != bytes {
            Issue.record("\(name) differs from the published source", sourceLocation: sourceLocation)
        }
    }

    /// A source tree: a sample version, plus `big.bin` of `bigBytes` random bytes when asked.
    static func source(_ sample: String, in dir: String, name: String, bigBytes: Int = 0, seed: UInt64 = 1) throws -> String {
        let path = "\(dir)/src-\(name)"
        try FileManager.default.copyItem(atPath: F.sampleApp(sample), toPath: path)
        if bigBytes > 0 {
            // Incompressible, so the gzip stays big and the transfer takes a while.
            var generator = SplitMix64(seed: seed)
            let bytes = (0..<bigBytes / 8).flatMap { _ in withUnsafeBytes(of: generator.next()) { Array($0) } }
            try Data(bytes).write(to: URL(fileURLWithPath: "\(path)/big.bin"))
        }
        return path
    }

    static func publish(_ source: String, version: String, out: String, key: SigningKey?) throws {
        _ = try Publisher.publish(PublishOptions(
            app: "sample", version: Version(version)!, sourceDirectory: source, publishDirectory: out,
            whitelist: ["https://h5.example.com/sample/"], signingKey: key))
    }

    // MARK: Static host

    @Test("a static nginx origin: N−1, N−2 and N−3 take their patch, older and new devices the full package; .sig, ETag/304, no query")
    func staticOrigin() async throws {
        if let missing = Nginx.missing { Issue.record(Comment(rawValue: "skipped: \(missing)")); return }
        let dir = TemporaryDirectory("cdn-static")
        let out = dir.file("publish")
        let key = SigningKey.generate()
        let config = Self.staticServer(root: out)
        let nginx = try await Nginx(server: config.server, http: config.http)
        defer { nginx.stop() }
        let manifest = "\(nginx.baseURL)/sample/manifest.json"

        // Devices end at 1.0.0 (older than N−3), 1.1.0, 1.2.0 and 1.3.0; "new" has nothing.
        let devices = ["1.0.0", "1.1.0", "1.2.0", "1.3.0"]
        func root(_ device: String) -> String { dir.file("device-\(device)") }
        for (index, version) in devices.enumerated() {
            try Self.publish(F.sampleApp(version), version: version, out: out, key: key)
            for device in devices[index...] {
                let report = try await Self.sync(root: root(device), manifest: manifest, key: key)
                #expect(report["result"] as? String == "updated", "\(device) at \(version): \(report)")
            }
        }
        let latest = try Self.source("1.3.0", in: dir.path, name: "1.4.0")
        try Data("<html><body>1.4.0 from the CDN</body></html>\n".utf8).write(to: URL(fileURLWithPath: "\(latest)/index.html"))
        try Self.publish(latest, version: "1.4.0", out: out, key: key)
        let state = try #require(try PublishState.load(appDirectory: "\(out)/sample"))
        #expect(state.patches.map(\.from) == ["1.1.0", "1.2.0", "1.3.0"].map { Version($0)! })

        let before = nginx.accessLog().count
        for device in devices + ["new"] {
            // Two devices ask for the static file exactly as configured: no query to split the cache.
            let extra = ["1.1.0", "1.3.0"].contains(device) ? ["--no-manifest-query"] : []
            let report = try await Self.sync(root: root(device), manifest: manifest, key: key, extra: extra)
            #expect(report["result"] as? String == "updated", "\(device): \(report)")
            let patch = state.patches.first { $0.from.description == device }
            if let patch {
                #expect(report["via"] as? String == "patch", "\(device): \(report)")
                #expect(report["bytesDownloaded"] as? Int == Int(patch.size), "\(device) downloads only its patch: \(report)")
            } else {
                #expect(report["via"] as? String == "full", "\(device): \(report)")
            }
            try Self.expectInstalled(latest, version: "1.4.0", root: root(device))
        }
        let log = Array(nginx.accessLog().dropFirst(before))
        for patch in state.patches {
            #expect(log.filter { $0.path == "/sample/\(patch.file)" && $0.status == 200 }.count == 1, "\(patch.file): \(log)")
        }
        #expect(log.filter { $0.path == "/sample/1.4.0.zip.gz" && $0.status == 200 }.count == 2, "the 1.0.0 and new devices: \(log)")
        // manifest.json carries its own signature: the detached .sig is for agents of format 1 only.
        #expect(log.filter { $0.path == "/sample/manifest.json.sig" }.isEmpty, "\(log)")
        let manifestTargets = log.filter { $0.path == "/sample/manifest.json" }.map(\.target)
        #expect(manifestTargets.filter { $0 == "/sample/manifest.json" }.count == 2, "\(manifestTargets)")
        #expect(manifestTargets.filter { $0.hasPrefix("/sample/manifest.json?app=sample&current=") }.count == 3, "\(manifestTargets)")

        // ETag/304: nginx answers the agent's If-None-Match; nothing is downloaded.
        let mark = nginx.accessLog().count
        let again = try await Self.sync(root: root("1.2.0"), manifest: manifest, key: key)
        #expect(again["result"] as? String == "up-to-date", "\(again)")
        let revalidated = nginx.accessLog().dropFirst(mark).filter { $0.path == "/sample/manifest.json" }
        #expect(revalidated.count == 1 && revalidated.first?.status == 304 && revalidated.first?.ifNoneMatch.isEmpty == false,
                "\(revalidated)")
        try Self.expectInstalled(latest, version: "1.4.0", root: root("1.2.0"))
    }

    @Test("a sync killed mid-download through nginx resumes with Range and If-Range, and installs byte for byte")
    func killedDownloadResumes() async throws {
        if let missing = Nginx.missing { Issue.record(Comment(rawValue: "skipped: \(missing)")); return }
        let dir = TemporaryDirectory("cdn-resume")
        let out = dir.file("publish")
        let key = SigningKey.generate()
        let source = try Self.source("1.0.0", in: dir.path, name: "big", bigBytes: 2 << 20)
        try Self.publish(source, version: "1.0.0", out: out, key: key)
        let config = Self.staticServer(root: out, rate: "128k")
        let nginx = try await Nginx(server: config.server, http: config.http)
        defer { nginx.stop() }
        let manifest = "\(nginx.baseURL)/sample/manifest.json"
        let root = dir.file("device")

        let running = try CLI.start(["sync", "--allow-unsigned", "--root", root, "--app", "sample", "--manifest", manifest, "--force", "--json",
                                     "--public-key", key.publicKeyBase64])
        let downloads = Store(root: root).downloadsDirectory("sample")
        // A bound on a download that never starts, not a speed (a loaded machine starts slowly).
        let deadline = Date().addingTimeInterval(300)
        var partial: Int64 = 0
        while Date() < deadline, running.process.isRunning {
            let sizes = ((try? FileManager.default.contentsOfDirectory(atPath: downloads)) ?? [])
                .filter { $0.hasSuffix(".part") }
                .compactMap { FileSystem.fileSize("\(downloads)/\($0)") }
            partial = sizes.max() ?? 0
            if partial >= 64 << 10 { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        kill(running.process.processIdentifier, SIGKILL)
        let killed = await CLI.finish(running)
        #expect(killed.signaled, "the sync was still downloading when killed: \(killed.stdout) \(killed.stderr)")
        #expect(partial >= 64 << 10, "a partial download was on disk")
        #expect(Store(root: root).active("sample") == nil)

        let report = try await Self.sync(root: root, manifest: manifest, key: key)
        #expect(report["result"] as? String == "updated", "\(report)")
        try Self.expectInstalled(source, version: "1.0.0", root: root)
        let gzip = nginx.accessLog().filter { $0.path == "/sample/1.0.0.zip.gz" }
        let resumed = try #require(gzip.last, "\(nginx.accessLog())")
        #expect(gzip.count == 2, "\(gzip)")
        #expect(resumed.status == 206, "\(resumed)")
        let offset = Int64(resumed.range.dropFirst("bytes=".count).prefix { $0 != "-" }) ?? -1
        #expect(resumed.range.hasPrefix("bytes=") && resumed.range.hasSuffix("-") && offset >= partial, "\(resumed)")
        #expect(!resumed.ifRange.isEmpty, "the resume is conditional on the same file: \(resumed)")
        #expect(Int64(report["bytesDownloaded"] as? Int ?? 0) < Int64(2 << 20), "only the rest was downloaded: \(report)")
    }

    // MARK: Caching proxy

    @Test("nginx proxy_cache before offline-server: a cached 200 and 206 install byte for byte, 304 and revalidation, a new version within max-age")
    func cachingProxy() async throws {
        if let missing = Nginx.missing { Issue.record(Comment(rawValue: "skipped: \(missing)")); return }
        let dir = TemporaryDirectory("cdn-proxy")
        let out = dir.file("publish")
        let v1 = try Self.source("1.0.0", in: dir.path, name: "1.0.0", bigBytes: 1 << 20)
        try Self.publish(v1, version: "1.0.0", out: out, key: nil)

        let maxAge = 2
        let upstream = try await OfflineServerProcess(arguments: ["--dir", out, "--manifest-max-age", "\(maxAge)"])
        defer { upstream.stopInBackground() }
        let nginx = try await Nginx(
            server: """
                    location / {
                        proxy_pass http://127.0.0.1:\(upstream.port);
                        proxy_http_version 1.1;
                        proxy_set_header Connection "";
                        proxy_cache cdn;
                        proxy_cache_revalidate on;
                        limit_rate $first_rate;
                    }
            """,
            http: """
                proxy_cache_path {prefix}/cache levels=1 keys_zone=cdn:1m max_size=64m inactive=10m use_temp_path=off;
                map $http_range $first_rate { "" 128k; default 0; }
            """)
        defer { nginx.stop() }
        let manifest = "\(nginx.baseURL)/manifest"
        let first = dir.file("device-a"), second = dir.file("device-b")

        // Device A: killed half way through the (slowed) full download, then resumed: the
        // proxy answers the Range from its cached copy.
        let running = try CLI.start(["sync", "--allow-unsigned", "--root", first, "--app", "sample", "--manifest", manifest, "--force", "--json"])
        let downloads = Store(root: first).downloadsDirectory("sample")
        let deadline = Date().addingTimeInterval(300)  // a bound on a hang, as above
        while Date() < deadline, running.process.isRunning {
            let sizes = ((try? FileManager.default.contentsOfDirectory(atPath: downloads)) ?? [])
                .filter { $0.hasSuffix(".part") }.compactMap { FileSystem.fileSize("\(downloads)/\($0)") }
            if (sizes.max() ?? 0) >= 32 << 10 { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        kill(running.process.processIdentifier, SIGKILL)
        _ = await CLI.finish(running)
        let resumed = try await Self.sync(root: first, manifest: manifest, key: nil)
        #expect(resumed["result"] as? String == "updated", "\(resumed)")
        try Self.expectInstalled(v1, version: "1.0.0", root: first)
        let ranged = nginx.accessLog().filter { $0.path == "/sample/1.0.0.zip.gz" && $0.status == 206 }
        #expect(ranged.count == 1 && ranged.first?.cacheStatus == "HIT", "the 206 came from the cache: \(nginx.accessLog())")

        // Device B: the whole package from the cache.
        let full = try await Self.sync(root: second, manifest: manifest, key: nil)
        #expect(full["result"] as? String == "updated", "\(full)")
        try Self.expectInstalled(v1, version: "1.0.0", root: second)
        let cached = nginx.accessLog().filter { $0.path == "/sample/1.0.0.zip.gz" && $0.status == 200 }.last
        #expect(cached?.cacheStatus == "HIT", "\(nginx.accessLog())")

        // Unchanged: the proxy answers If-None-Match itself, then revalidates with the server once max-age has passed.
        var mark = nginx.accessLog().count
        let unchanged = try await Self.sync(root: second, manifest: manifest, key: nil)
        #expect(unchanged["result"] as? String == "up-to-date", "\(unchanged)")
        let answered = nginx.accessLog().dropFirst(mark).filter { $0.path == "/manifest" }
        #expect(answered.map(\.status) == [304], "\(answered)")
        try await Task.sleep(for: .seconds(maxAge + 1))
        mark = nginx.accessLog().count
        let later = try await Self.sync(root: second, manifest: manifest, key: nil)
        #expect(later["result"] as? String == "up-to-date", "\(later)")
        let revalidated = nginx.accessLog().dropFirst(mark).filter { $0.path == "/manifest" }
        #expect(revalidated.map(\.cacheStatus) == ["REVALIDATED"], "\(revalidated)")

        // A new version reaches the device through the proxy once max-age has passed: without
        // revalidation it never would (the cache keeps entries 10 min), so the 60 s of slack
        // for a loaded machine is a bound on a hang, not a speed.
        let v2 = try Self.source("1.1.0", in: dir.path, name: "1.1.0", bigBytes: 1 << 20)
        try Self.publish(v2, version: "1.1.0", out: out, key: nil)
        let published = Date()
        var outcome: [String: Any] = [:]
        while Date().timeIntervalSince(published) < Double(maxAge) + 60 {
            outcome = try await Self.sync(root: second, manifest: manifest, key: nil)
            if outcome["result"] as? String != "up-to-date" { break }
            try await Task.sleep(for: .milliseconds(300))
        }
        #expect(outcome["result"] as? String == "updated", "\(outcome)")
        #expect(outcome["via"] as? String == "patch", "\(outcome)")
        try Self.expectInstalled(v2, version: "1.1.0", root: second)
    }
}
