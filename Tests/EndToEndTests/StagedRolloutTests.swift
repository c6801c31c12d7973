import Foundation
import Testing
@testable import OfflineAgent
import OfflinePublish
import TestSupport

/// Operators steering a live release (issue 31), shown with real processes: the
/// `offline-publish` verbs, nginx serving the publish directory as any static host,
/// or `offline-server`, and `offline-agent sync` on devices with distinct device ids
/// (so distinct rollout buckets).
@Suite("Staged rollouts and release verbs (real devices)", .serialized)
struct StagedRolloutTests {
    typealias F = PublishFixtures
    static let app = "sample"
    static let whitelist = "https://h5.example.com/sample/"

    /// A device: its root and the bucket its id falls in for `sample`.
    struct Device: CustomStringConvertible {
        var name: String
        var root: String
        var bucket: Int
        var description: String { "\(name)(bucket \(bucket))" }
    }

    /// Devices whose ids fall, for app `sample`, two in each of 1–10, 11–50 and 51–100,
    /// plus `late`, a seventh in 1–10 that skips the first staged check.
    static func devices(in dir: TemporaryDirectory) throws -> (all: [Device], late: Device) {
        var picked: [Device] = []
        var late: Device?
        for index in 0..<10_000 {
            let id = "device-\(index)"
            let bucket = Resolver.rolloutBucket(deviceID: id, app: app)
            let range = bucket <= 10 ? 0 : bucket <= 50 ? 1 : 2
            let root = dir.file(id)
            if picked.filter({ ($0.bucket <= 10 ? 0 : $0.bucket <= 50 ? 1 : 2) == range }).count < 2 {
                picked.append(Device(name: id, root: root, bucket: bucket))
            } else if range == 0, late == nil {
                late = Device(name: id, root: root, bucket: bucket)
            }
            if picked.count == 6, late != nil { break }
        }
        let all = picked + [late!]
        for device in all {
            try FileManager.default.createDirectory(atPath: device.root, withIntermediateDirectories: true)
            try Data(device.name.utf8).write(to: URL(fileURLWithPath: "\(device.root)/device-id"))
        }
        return (picked, late!)
    }

    /// `offline-agent sync --json --force` (past the 5-minute throttle) on one device.
    static func sync(_ device: Device, manifest: String, key: SigningKey) async throws -> [String: Any] {
        let result = try await CLI.run([
            "sync", "--root", device.root, "--app", app, "--manifest", manifest, "--force", "--json",
            "--public-key", key.publicKeyBase64,
        ])
        var json = CLI.json(result.stdout) ?? ["stderr": result.stderr]
        json["status"] = Int(result.status)
        return json
    }

    /// `offline-publish` as an operator runs it; fails the test when it fails.
    @discardableResult
    static func publisher(_ arguments: [String], sourceLocation: SourceLocation = #_sourceLocation) async throws -> CLI.Result {
        let result = try await CLI.run(arguments, executable: CLI.publisher)
        #expect(result.status == 0, "\(arguments): \(result.stderr)", sourceLocation: sourceLocation)
        return result
    }

    static func active(_ device: Device) -> Version? { Store(root: device.root).active(app)?.version }

    /// The device still answers its whitelisted URLs from the package, with no network.
    static func servesOffline(_ device: Device, sourceLocation: SourceLocation = #_sourceLocation) {
        let resolver = Resolver(store: Store(root: device.root), deviceID: device.name)
        guard case .file = resolver.resolve(URL(string: whitelist + "index.html")!) else {
            Issue.record("\(device) does not serve its package offline", sourceLocation: sourceLocation)
            return
        }
    }

    /// The story of a release against one host: canary 10 %, halt, widen, revert, and
    /// keeping `expires` fresh, each step seen by every device at its next check.
    static func runRelease(host manifest: String, out: String, keyFile: String, key: SigningKey, dir: TemporaryDirectory) async throws {
        let (devices, late) = try devices(in: dir)
        let everyone = devices + [late]
        let base = ["--app", app, "--out", out, "--key", keyFile]
        try await publisher(["publish", "--version", "1.0.0", "--source", F.sampleApp("1.0.0"), "--whitelist", whitelist] + base)
        for device in everyone {
            let report = try await sync(device, manifest: manifest, key: key)
            #expect(report["result"] as? String == "updated", "\(device): \(report)")
        }

        // Canary: 1.1.0 to 10 %. Only buckets 1–10 take it; the others keep 1.0.0 offline.
        try await publisher(["publish", "--version", "1.1.0", "--source", F.sampleApp("1.1.0"), "--stage", "10"] + base)
        for device in devices {
            let report = try await sync(device, manifest: manifest, key: key)
            #expect(report["status"] as? Int == 0, "\(device): \(report)")
            if device.bucket <= 10 {
                #expect(report["result"] as? String == "updated", "\(device): \(report)")
                #expect(active(device) == Version("1.1.0"))
            } else {
                #expect(report["result"] as? String == "not-in-stage", "\(device): \(report)")
                #expect(report["bytesDownloaded"] as? Int == 0, "\(device): \(report)")
                #expect(report["stage"] as? Int == 10 && report["bucket"] as? Int == device.bucket, "\(device): \(report)")
                #expect(report["offeredVersion"] as? String == "1.1.0", "\(device): \(report)")
                #expect(active(device) == Version("1.0.0"))
            }
            servesOffline(device)
        }

        // Halt: no new device takes 1.1.0 (late is in bucket 1–10); those on it keep it.
        try await publisher(["stage", "--percent", "0"] + base)
        let halted = try await sync(late, manifest: manifest, key: key)
        #expect(halted["result"] as? String == "not-in-stage" && halted["status"] as? Int == 0, "\(halted)")
        #expect(active(late) == Version("1.0.0"))
        for device in devices where device.bucket <= 10 {
            let report = try await sync(device, manifest: manifest, key: key)
            #expect(report["result"] as? String == "up-to-date", "\(device): \(report)")
            #expect(active(device) == Version("1.1.0"))
        }

        // Widen to 50 %: taken at the next check, without a new version.
        try await publisher(["stage", "--percent", "50"] + base)
        for device in everyone {
            let report = try await sync(device, manifest: manifest, key: key)
            if device.bucket <= 50 {
                #expect(active(device) == Version("1.1.0"), "\(device): \(report)")
            } else {
                #expect(report["result"] as? String == "not-in-stage", "\(device): \(report)")
                #expect(active(device) == Version("1.0.0"))
            }
        }

        // Revert: 1.0.0's exact package as 1.1.1; devices on the bad 1.1.0 move back by patch.
        try await publisher(["revert", "--to", "1.0.0"] + base)
        let package100 = try Data(contentsOf: URL(fileURLWithPath: "\(out)/\(app)/1.0.0.zip"))
        #expect(try Data(contentsOf: URL(fileURLWithPath: "\(out)/\(app)/1.1.1.zip")) == package100)
        for device in everyone {
            let report = try await sync(device, manifest: manifest, key: key)
            #expect(report["result"] as? String == "updated", "\(device): \(report)")
            #expect(report["via"] as? String == "patch", "\(device): \(report)")
            #expect(active(device) == Version("1.1.1"))
            let installed = F.tree(Store(root: device.root).versionDirectory(app, Version("1.1.1")!))
            #expect(installed == F.tree(F.sampleApp("1.0.0")), "\(device) runs 1.0.0's files again")
        }

        // An expiring manifest: refused once expired, accepted again after `set --expires 7d`.
        // Half a minute ahead: `set` refuses a time already past, and a loaded machine may take
        // seconds to start it. Then a wait until that time has passed.
        let expiry = Date().addingTimeInterval(30)
        try await publisher(["set", "--expires", RFC3339.string(from: expiry)] + base)
        let untilExpired = expiry.addingTimeInterval(1).timeIntervalSinceNow
        if untilExpired > 0 { try await Task.sleep(for: .seconds(untilExpired)) }
        let expired = try await sync(devices[0], manifest: manifest, key: key)
        #expect(expired["errorCode"] as? String == "expired", "\(expired)")
        try await publisher(["set", "--expires", "7d", "--reason", "cron keeps the signature fresh"] + base)
        let fresh = try await sync(devices[0], manifest: manifest, key: key)
        #expect(fresh["result"] as? String == "up-to-date", "\(fresh)")

        let history = try await publisher(["history", "--app", app, "--out", out, "--json"])
        let json = try #require(CLI.json(history.stdout))
        let verbs = (json["revisions"] as? [[String: Any]])?.compactMap { $0["verb"] as? String }
        #expect(verbs == ["publish", "publish", "stage", "stage", "revert", "set", "set"], "\(history.stdout)")
    }

    static func keyFile(in dir: TemporaryDirectory) throws -> (String, SigningKey) {
        let key = SigningKey.generate()
        let path = dir.file("key")
        try key.write(to: path)
        return (path, key)
    }

    @Test("nginx: 10 % canary, halt, widen, revert by patch, set --expires; every device checks with its own bucket")
    func releaseOnStaticHost() async throws {
        if let missing = Nginx.missing { Issue.record(Comment(rawValue: "skipped: \(missing)")); return }
        let dir = TemporaryDirectory("stage-nginx")
        let out = dir.file("publish")
        let config = StaticCDNTests.staticServer(root: out)
        let nginx = try await Nginx(server: config.server, http: config.http)
        defer { nginx.stop() }
        let (path, key) = try Self.keyFile(in: dir)
        try await Self.runRelease(host: "\(nginx.baseURL)/sample/manifest.json", out: out, keyFile: path, key: key, dir: dir)
    }

    @Test("offline-server: its dynamic manifests follow stage, halt, widen, revert and set --expires")
    func releaseOnReferenceServer() async throws {
        let dir = TemporaryDirectory("stage-server")
        let out = dir.file("publish")
        try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
        let (path, key) = try Self.keyFile(in: dir)
        let server = try await OfflineServerProcess(arguments: ["--dir", out, "--key", path, "--no-reports"])
        defer { server.stopInBackground() }
        try await Self.runRelease(host: server.manifestURL, out: out, keyFile: path, key: key, dir: dir)
        // The dynamic answer carries its own signature too, and the header signs the whole body.
        let response = try await PublishHTTP.fetch(server.manifestURL + "?app=sample&current=1.1.0")
        let envelope = try #require(try ManifestEnvelope.open(response.body))
        let publicKey = try ManifestSignature.publicKey(base64: key.publicKeyBase64)
        try ManifestSignature.verify(try #require(envelope.signature), of: envelope.manifest, with: publicKey)
        try ManifestSignature.verify(try #require(response.header("X-Offline-Signature")), of: response.body, with: publicKey)
        #expect(try Manifest.decode(envelope.manifest).isPatch, "a patch from the device's version")
    }

    @Test("a stage schedule widens by itself with time, measured from the publish time the manifest carries")
    func scheduleWidensWithTime() async throws {
        let dir = TemporaryDirectory("stage-schedule")
        let out = dir.file("publish")
        try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
        let (path, key) = try Self.keyFile(in: dir)
        let server = try await OfflineServerProcess(arguments: ["--dir", out, "--key", path, "--no-reports"])
        defer { server.stopInBackground() }
        let (devices, _) = try Self.devices(in: dir)
        let base = ["--app", Self.app, "--out", out, "--key", path]
        try await Self.publisher(["publish", "--version", "1.0.0", "--source", F.sampleApp("1.0.0"), "--whitelist", Self.whitelist] + base)
        for device in devices { _ = try await Self.sync(device, manifest: server.manifestURL, key: key) }
        // 10 % now, everyone a minute later: the same manifest bytes, a different answer. A
        // minute is far more than six syncs take on a loaded machine.
        try await Self.publisher(["publish", "--version", "1.1.0", "--source", F.sampleApp("1.1.0"), "--stage-schedule", "10@0s,100@60s"] + base)
        let published = Date()  // no earlier than the publish time the manifest carries
        for device in devices {
            let report = try await Self.sync(device, manifest: server.manifestURL, key: key)
            #expect(report["result"] as? String == (device.bucket <= 10 ? "updated" : "not-in-stage"), "\(device): \(report)")
        }
        let untilWidened = published.addingTimeInterval(61).timeIntervalSinceNow
        if untilWidened > 0 { try await Task.sleep(for: .seconds(untilWidened)) }
        for device in devices where device.bucket > 10 {
            let report = try await Self.sync(device, manifest: server.manifestURL, key: key)
            #expect(report["result"] as? String == "updated", "\(device): \(report)")
        }
    }

    @Test("promote: the beta's exact package bytes become the production version; devices of production take it by patch")
    func promoteIsByteIdentical() async throws {
        if let missing = Nginx.missing { Issue.record(Comment(rawValue: "skipped: \(missing)")); return }
        let dir = TemporaryDirectory("stage-promote")
        let beta = dir.file("beta"), production = dir.file("production")
        let (path, key) = try Self.keyFile(in: dir)
        for (out, versions) in [(beta, ["1.0.0", "1.1.0"]), (production, ["1.0.0"])] {
            for version in versions {
                try await Self.publisher(["publish", "--app", Self.app, "--out", out, "--key", path, "--version", version,
                                    "--source", F.sampleApp(version), "--whitelist", Self.whitelist])
            }
        }
        let config = StaticCDNTests.staticServer(root: production)
        let nginx = try await Nginx(server: config.server, http: config.http)
        defer { nginx.stop() }
        let server = try await OfflineServerProcess(arguments: ["--dir", production, "--key", path, "--no-reports"])
        defer { server.stopInBackground() }
        let device = Device(name: "device-promote", root: dir.file("device"), bucket: 0)
        let serverDevice = Device(name: "device-promote-server", root: dir.file("device-server"), bucket: 0)
        let manifest = "\(nginx.baseURL)/sample/manifest.json"
        #expect(try await Self.sync(device, manifest: manifest, key: key)["result"] as? String == "updated")
        #expect(try await Self.sync(serverDevice, manifest: server.manifestURL, key: key)["result"] as? String == "updated")

        try await Self.publisher(["promote", "--app", Self.app, "--version", "1.1.0", "--from", beta, "--to", production, "--key", path])
        for file in ["1.1.0.zip", "1.1.0.zip.gz"] {
            let promoted = try Data(contentsOf: URL(fileURLWithPath: "\(production)/sample/\(file)"))
            #expect(promoted == (try Data(contentsOf: URL(fileURLWithPath: "\(beta)/sample/\(file)"))), "\(file)")
        }
        for (device, manifest) in [(device, manifest), (serverDevice, server.manifestURL)] {
            let report = try await Self.sync(device, manifest: manifest, key: key)
            #expect(report["result"] as? String == "updated" && report["via"] as? String == "patch", "\(device): \(report)")
            let installed = F.tree(Store(root: device.root).versionDirectory(Self.app, Version("1.1.0")!))
            #expect(installed == F.tree(F.sampleApp("1.1.0")), "\(device)")
        }
    }

    @Test("a manifest and a stale detached signature can no longer be paired; the detached form still works alone")
    func staleSignatureCannotPair() async throws {
        if let missing = Nginx.missing { Issue.record(Comment(rawValue: "skipped: \(missing)")); return }
        let dir = TemporaryDirectory("stage-sig")
        let out = dir.file("publish")
        let (path, key) = try Self.keyFile(in: dir)
        let config = StaticCDNTests.staticServer(root: out)
        let nginx = try await Nginx(server: config.server, http: config.http)
        defer { nginx.stop() }
        let manifest = "\(nginx.baseURL)/sample/manifest.json"
        let device = Device(name: "device-sig", root: dir.file("device"), bucket: 0)
        let base = ["--app", Self.app, "--out", out, "--key", path, "--whitelist", Self.whitelist]
        try await Self.publisher(["publish", "--version", "1.0.0", "--source", F.sampleApp("1.0.0")] + base)
        #expect(try await Self.sync(device, manifest: manifest, key: key)["result"] as? String == "updated")
        let sigPath = "\(out)/sample/manifest.json.sig"
        let staleSig = try Data(contentsOf: URL(fileURLWithPath: sigPath))

        // A CDN mid-purge: the new manifest.json beside the old .sig. The envelope decides.
        try await Self.publisher(["publish", "--version", "1.1.0", "--source", F.sampleApp("1.1.0")] + base)
        try staleSig.write(to: URL(fileURLWithPath: sigPath))
        let report = try await Self.sync(device, manifest: manifest, key: key)
        #expect(report["result"] as? String == "updated", "\(report)")

        // The format 1 form (the bare signed body) is still accepted with its own .sig, and
        // refused with a stale one: that pairing is what the envelope takes away.
        try await Self.publisher(["publish", "--version", "1.2.0", "--source", F.sampleApp("1.2.0")] + base)
        let file = try Data(contentsOf: URL(fileURLWithPath: "\(out)/sample/manifest.json"))
        let inner = try #require(try ManifestEnvelope.open(file)).manifest
        try inner.write(to: URL(fileURLWithPath: "\(out)/sample/manifest.json"))
        try staleSig.write(to: URL(fileURLWithPath: sigPath))
        let refused = try await Self.sync(device, manifest: manifest, key: key)
        #expect(refused["errorCode"] as? String == "signature-invalid", "\(refused)")
        try Data((try key.sign(inner) + "\n").utf8).write(to: URL(fileURLWithPath: sigPath))
        let accepted = try await Self.sync(device, manifest: manifest, key: key)
        #expect(accepted["result"] as? String == "updated", "\(accepted)")
        #expect(Self.active(device) == Version("1.2.0"))
    }
}
