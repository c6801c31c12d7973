import Foundation
import Testing
@testable import OfflineAgent
@testable import OfflinePublish
import TestSupport

/// One delegated targets role per app (issue 37): `offline-publish delegate` gives an app
/// its own key, which then ships that app and nothing else; devices find each app's files
/// through the specification's delegation search (5.6.7). Real processes, nginx, and
/// python-tuf 7.0.1 both ways.
@Suite("TUF delegations (nginx, python-tuf)", .serialized)
struct TUFDelegationTests {
    typealias F = PublishFixtures

    /// A publish directory with the apps `sample` and `shop` at 1.0.0, published with
    /// `signing.key` (every top-level role), each then delegated to its own key
    /// (`sample.key`, `shop.key`), served by nginx.
    final class Scene: @unchecked Sendable {
        let dir = TemporaryDirectory("tuf-delegation")
        var out: String { dir.file("publish") }
        var metadata: String { "\(out)/metadata" }
        let nginx: Nginx

        init() async throws {
            nginx = try await Nginx(server: "root \(dir.file("publish"));")
        }

        func key(_ name: String) -> String { dir.file("\(name).key") }
        func fingerprint(_ name: String) throws -> String { TUFSigner.key(try SigningKey(contentsOfFile: key(name))).fingerprint }

        @discardableResult
        func publisher(_ arguments: [String], environment: [String: String] = [:]) async throws -> CLI.Result {
            try await CLI.run(arguments, environment: environment, executable: CLI.publisher)
        }

        func expectSuccess(_ arguments: [String], sourceLocation: SourceLocation = #_sourceLocation) async throws {
            let result = try await publisher(arguments)
            #expect(result.status == 0, "offline-publish \(arguments.joined(separator: " ")): \(result.stderr)", sourceLocation: sourceLocation)
        }

        func publish(_ app: String, _ version: String, key: String, snapshotKey: String? = nil) async throws {
            try await expectSuccess([
                "publish", "--app", app, "--version", version, "--source", F.sampleApp(version), "--out", out,
                "--whitelist", "https://h5.example.com/\(app)/", "--key", self.key(key),
            ] + (snapshotKey.map { ["--snapshot-key", self.key($0)] } ?? []))
        }

        func sync(_ app: String) async throws -> [String: Any] {
            let result = try await CLI.run([
                "sync", "--root", dir.file("device-\(app)"), "--app", app, "--manifest", "\(nginx.baseURL)/\(app)/manifest.json",
                "--trusted-root", "\(metadata)/1.root.json", "--force", "--json",
            ])
            return CLI.json(result.stdout) ?? ["stderr": result.stderr]
        }

        func expectInstalled(_ app: String, _ version: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
            try StaticCDNTests.expectInstalled(F.sampleApp(version), version: version, root: dir.file("device-\(app)"), app: app, sourceLocation: sourceLocation)
        }

        func chain() throws -> (timestamp: TUFTimestamp, snapshot: TUFSnapshot, targets: TUFTargets) {
            let (timestamp, snapshot, targets) = TUFRepository.currentChain(in: metadata)
            return (try #require(timestamp), try #require(snapshot), try #require(targets))
        }

        /// The published metadata of the delegated role `name`.
        func delegated(_ name: String) throws -> (path: String, targets: TUFTargets) {
            let version = try #require(try chain().snapshot.meta["\(name).json"]?.version)
            let path = "\(metadata)/\(version).\(name).json"
            return (path, try TUFTargets(Data(contentsOf: URL(fileURLWithPath: path))))
        }

        deinit { nginx.stop() }
    }

    static func delegatedScene() async throws -> Scene? {
        if let missing = Nginx.missing { Issue.record(Comment(rawValue: "skipped: \(missing)")); return nil }
        let scene = try await Scene()
        for name in ["signing", "sample", "shop"] { try await scene.expectSuccess(["keygen", "--out", scene.key(name)]) }
        try await scene.publish("sample", "1.0.0", key: "signing")
        try await scene.publish("shop", "1.0.0", key: "signing")
        for app in ["sample", "shop"] {
            #expect(try await scene.sync(app)["result"] as? String == "updated")
            try await scene.expectSuccess(["delegate", "--out", scene.out, "--app", app, "--app-key", scene.key(app), "--key", scene.key("signing")])
        }
        return scene
    }

    @Test("delegate moves an app's files to N.APP.json under its own key; that key ships the app, and is refused for another app naming both fingerprints")
    func appKeyShipsOnlyItsApp() async throws {
        guard let scene = try await Self.delegatedScene() else { return }
        let (_, snapshot, targets) = try scene.chain()
        #expect(!targets.targets.keys.contains { $0.hasPrefix("sample/") || $0.hasPrefix("shop/") }, "\(targets.targets.keys)")
        #expect(targets.delegations?.roles.map(\.name) == ["sample", "shop"])
        #expect(targets.delegations?.roles.allSatisfy { $0.terminating && $0.paths == ["\($0.name)/*"] && $0.role.threshold == 1 } == true)
        #expect(snapshot.meta["sample.json"] != nil && snapshot.meta["shop.json"] != nil)
        #expect(try scene.delegated("sample").targets.targets.keys.contains("sample/manifest.json"))
        // Expiry warnings cover each app's role, which lives as long as targets.
        let notices = TUFRepository.expiryNotices(publishDirectory: scene.out, now: Date())
        let sample = try #require(notices.first { $0.role == "sample" }, "\(notices)")
        #expect(sample.expires > Date().addingTimeInterval(80 * 86_400) && !sample.soon, "\(notices)")

        // The app's key with the snapshot key: a release of its app, which devices install.
        try await scene.publish("sample", "1.1.0", key: "sample", snapshotKey: "signing")
        let updated = try await scene.sync("sample")
        #expect(updated["result"] as? String == "updated" && updated["version"] as? String == "1.1.0", "\(updated)")
        try scene.expectInstalled("sample", "1.1.0")
        try await scene.expectSuccess(["stage", "--app", "sample", "--out", scene.out, "--percent", "0", "--key", scene.key("sample"), "--snapshot-key", scene.key("signing")])

        // Another app with it, or the app with the targets key it had before: refused, nothing written.
        let before = F.tree(scene.out)
        for (arguments, given, named) in [
            (["publish", "--app", "shop", "--version", "1.1.0", "--source", F.sampleApp("1.1.0"), "--key", scene.key("sample"),
              "--snapshot-key", scene.key("signing")], "sample", "shop"),
            (["stage", "--app", "shop", "--percent", "0", "--key", scene.key("sample"), "--snapshot-key", scene.key("signing")], "sample", "shop"),
            (["set", "--app", "shop", "--rollout", "50", "--key", scene.key("sample"), "--snapshot-key", scene.key("signing")], "sample", "shop"),
            (["revert", "--app", "sample", "--to", "1.0.0", "--key", scene.key("signing")], "signing", "sample"),
        ] {
            let result = try await scene.publisher(arguments + ["--out", scene.out])
            #expect(result.status == 64, "\(arguments): \(result.stderr)")
            let (ours, theirs) = (try scene.fingerprint(given), try scene.fingerprint(named))
            #expect(result.stderr.contains(ours) && result.stderr.contains(theirs), "\(result.stderr)")
            #expect(result.stderr.contains("names for \(named)"), "\(result.stderr)")
        }
        #expect(F.tree(scene.out) == before)
        #expect(try await scene.sync("shop")["version"] as? String == "1.0.0")
    }

    @Test("the runbook's split: a separate targets key delegates; the app key with the snapshot key ships the app, the snapshot key alone ships nothing, and undelegated apps take the targets key")
    func splitTargetsKey() async throws {
        if let missing = Nginx.missing { Issue.record(Comment(rawValue: "skipped: \(missing)")); return }
        let scene = try await Scene()
        for name in ["signing", "targets", "sample"] { try await scene.expectSuccess(["keygen", "--out", scene.key(name)]) }
        try await scene.publish("sample", "1.0.0", key: "signing")
        try await scene.publish("shop", "1.0.0", key: "signing")
        #expect(try await scene.sync("sample")["result"] as? String == "updated")
        let proposal = scene.dir.file("root-next.json")
        try await scene.expectSuccess(["root", "propose", "--out", scene.out, "--file", proposal, "--targets-key", scene.key("targets") + ".pub"])
        try await scene.expectSuccess(["root", "sign", "--file", proposal, "--key", scene.key("signing")])
        try await scene.expectSuccess(["root", "commit", "--out", scene.out, "--file", proposal])
        try await scene.expectSuccess([
            "delegate", "--out", scene.out, "--app", "sample", "--app-key", scene.key("sample"), "--key", scene.key("targets"),
            "--snapshot-key", scene.key("signing"),
        ])
        try await scene.publish("sample", "1.1.0", key: "sample", snapshotKey: "signing")
        let updated = try await scene.sync("sample")
        #expect(updated["result"] as? String == "updated" && updated["version"] as? String == "1.1.0", "\(updated)")
        try scene.expectInstalled("sample", "1.1.0")

        // The snapshot key, which the host keeps online, signs neither an app's role nor the targets.
        for app in ["sample", "shop"] {
            let result = try await scene.publisher(["stage", "--app", app, "--out", scene.out, "--percent", "0", "--key", scene.key("signing")])
            let signing = try scene.fingerprint("signing")
            #expect(result.status == 64 && result.stderr.contains(signing), "\(app): \(result.stderr)")
        }
        try await scene.publish("shop", "1.1.0", key: "targets", snapshotKey: "signing")
        #expect(try await scene.sync("shop")["version"] as? String == "1.1.0")
    }

    @Test("delegate --halt-key, then halt with that key alone: devices on the root stop taking the version; another key is refused naming both fingerprints")
    func haltKeyFromTheCommandLine() async throws {
        guard let scene = try await Self.delegatedScene() else { return }
        try await scene.expectSuccess(["keygen", "--out", scene.key("halt")])
        try await scene.expectSuccess([
            "delegate", "--out", scene.out, "--app", "sample", "--halt-key", scene.key("halt"), "--key", scene.key("signing"),
        ])
        #expect(try scene.chain().targets.delegations?.roles.map(\.name) == ["sample.halt", "sample", "shop"])
        try await scene.publish("sample", "1.1.0", key: "sample", snapshotKey: "signing")
        let refused = try await scene.publisher(["halt", "--app", "sample", "--out", scene.out, "--key", scene.key("sample"), "--snapshot-key", scene.key("signing")])
        let (given, named) = (try scene.fingerprint("sample"), try scene.fingerprint("halt"))
        #expect(refused.status == 64 && refused.stderr.contains(given) && refused.stderr.contains(named), "\(refused.stderr)")
        let halt = ["halt", "--app", "sample", "--out", scene.out, "--key", scene.key("halt"), "--snapshot-key", scene.key("signing"), "--reason", "test"]
        // Killed after the rollout file, before its metadata: not a halt yet, and the next run signs it.
        let crashed = try await scene.publisher(halt, environment: ["OFFLINE_PUBLISH_CRASH_AT": "after-rollout-file"])
        #expect(crashed.signaled && crashed.status == SIGKILL, "\(crashed.stderr)")
        #expect(FileManager.default.fileExists(atPath: "\(scene.out)/sample/rollout.json"))
        #expect(TUFRepository.rolloutStage(app: "sample", publishDirectory: scene.out) == nil)
        try await scene.expectSuccess(halt)
        #expect(TUFRepository.rolloutStage(app: "sample", publishDirectory: scene.out) == 0)
        let halted = try await scene.sync("sample")
        #expect(halted["result"] as? String == "not-in-stage", "\(halted)")
        try scene.expectInstalled("sample", "1.0.0")
        // python-tuf's ngclient reads the halt role's file like any target.
        if PythonTUF.missing == nil {
            let seen = try #require(CLI.json(try await PythonTUF.run("ngclient.py", [scene.nginx.baseURL, "\(scene.metadata)/1.root.json", scene.dir.file("ngclient"), "sample"])))
            #expect(seen["version"] as? String == "1.1.0", "\(seen)")
        }
    }

    @Test("attacker with one app's key: another app's metadata signed with it is refused (threshold-not-met); its files listed in its own role are never consulted")
    func appKeyCannotShipAnotherApp() async throws {
        guard let scene = try await Self.delegatedScene() else { return }
        let sampleKey = try SigningKey(contentsOfFile: scene.key("sample"))
        // The evil release: shop 1.1.0 built without any key, its files placed in the
        // repository under their hash-prefixed names, as an attacker on the host can.
        let evil = scene.dir.file("evil")
        _ = try Publisher.publish(PublishOptions(
            app: "shop", version: Version("1.1.0")!, sourceDirectory: F.sampleApp("1.1.0"), publishDirectory: evil,
            whitelist: ["https://h5.example.com/shop/"], signingKey: nil))
        var listed: [String: StrictJSON] = [:]
        for name in ["manifest.json", "1.1.0.zip.gz"] {
            let digest = try PublishFileWriter.digest(of: "\(evil)/shop/\(name)")
            try FileManager.default.copyItem(atPath: "\(evil)/shop/\(name)", toPath: "\(scene.out)/shop/\(digest.sha256).\(name)")
            listed["shop/\(name)"] = TUFTargetFile(length: digest.size, sha256: digest.sha256).json
        }
        func forged(version: Int64) throws -> Data {
            var signed = TUFSigner.common(type: "targets", version: version, expires: Date().addingTimeInterval(86_400))
            signed["targets"] = .object(listed)
            return try TUFSigner.file(signed, keys: [sampleKey])
        }

        // 1. shop's own next metadata, signed with sample's key: the device checks it against the
        //    key the top-level targets delegate shop to.
        try await scene.expectSuccess(["stage", "--app", "shop", "--out", scene.out, "--percent", "100", "--key", scene.key("shop"), "--snapshot-key", scene.key("signing")])
        let (path, shop) = try scene.delegated("shop")
        try forged(version: shop.metadata.version).write(to: URL(fileURLWithPath: path))
        let refused = try await scene.sync("shop")
        #expect(refused["result"] as? String == "failed" && refused["errorCode"] as? String == "threshold-not-met", "\(refused)")
        try scene.expectInstalled("shop", "1.0.0")

        // 2. shop's files listed in sample's own metadata: sample is trusted for sample/* only,
        //    so a search for shop/… never even fetches it.
        let (samplePath, sample) = try scene.delegated("sample")
        try forged(version: sample.metadata.version).write(to: URL(fileURLWithPath: samplePath))
        try await scene.expectSuccess(["stage", "--app", "shop", "--out", scene.out, "--percent", "90", "--key", scene.key("shop"), "--snapshot-key", scene.key("signing")])
        let start = scene.nginx.accessLog().count
        let report = try await scene.sync("shop")
        #expect(report["result"] as? String != "updated" && report["version"] as? String == "1.0.0", "\(report)")
        try scene.expectInstalled("shop", "1.0.0")
        let paths = scene.nginx.accessLog().dropFirst(start).map(\.path)
        #expect(paths.contains { $0.hasSuffix(".shop.json") } && !paths.contains { $0.hasSuffix(".sample.json") }, "\(paths)")
    }

    @Test("python-tuf's ngclient downloads a delegated app's manifest and package from our repository, after delegate and after the app key's publish")
    func ngclientReadsDelegatedApp() async throws {
        guard PythonTUF.missing == nil else { Issue.record(Comment(rawValue: "skipped: \(PythonTUF.missing ?? "")")); return }
        guard let scene = try await Self.delegatedScene() else { return }
        let work = scene.dir.file("ngclient")
        func ngclient() async throws -> [String: Any] {
            try #require(CLI.json(try await PythonTUF.run("ngclient.py", [scene.nginx.baseURL, "\(scene.metadata)/1.root.json", work, "sample"])))
        }
        var seen = try await ngclient()
        #expect(seen["version"] as? String == "1.0.0" && seen["downloaded"] as? [String] == ["sample/manifest.json", "sample/1.0.0.zip.gz"], "\(seen)")
        try await scene.publish("sample", "1.1.0", key: "sample", snapshotKey: "signing")
        seen = try await ngclient()
        #expect(seen["version"] as? String == "1.1.0", "\(seen)")
        #expect(seen["downloaded"] as? [String] == ["sample/manifest.json", "sample/1.1.0.zip.gz", "sample/1.0.0-1.1.0.bsdiff"], "\(seen)")
        #expect(scene.nginx.accessLog().contains { $0.path.hasSuffix(".sample.json") })
    }

    @Test("offline-agent installs from a python-tuf repository whose targets delegate: nested, terminating, and roles whose paths do not match never fetched")
    func agentReadsPythonDelegations() async throws {
        guard PythonTUF.missing == nil else { Issue.record(Comment(rawValue: "skipped: \(PythonTUF.missing ?? "")")); return }
        if let missing = Nginx.missing { Issue.record(Comment(rawValue: "skipped: \(missing)")); return }
        let dir = TemporaryDirectory("tuf-python-delegations")
        let published = try TUFInteropTests.unsignedSample(dir)
        let repo = dir.file("repo")
        try await PythonTUF.run("delegated-repository.py", [repo, "sample", "\(published)/sample/manifest.json", "\(published)/sample/1.0.0.zip.gz"])
        let nginx = try await Nginx(server: "root \(repo);")
        defer { nginx.stop() }
        let device = dir.file("device")
        let report = try await TUFInteropTests.trustedSync(device: device, base: nginx.baseURL, root: "\(repo)/metadata/1.root.json")
        #expect(report["result"] as? String == "updated", "\(report)")
        try StaticCDNTests.expectInstalled(F.sampleApp("1.0.0"), version: "1.0.0", root: device)
        let paths = nginx.accessLog().map(\.path)
        #expect(paths.contains("/metadata/1.sample.json") && paths.contains("/metadata/1.sample-packages.json"), "\(paths)")
        #expect(!paths.contains("/metadata/1.other.json") && !paths.contains("/metadata/1.after.json"), "\(paths)")
    }

    @Test("kill -9 after an app's delegated metadata is written (delegate, and a publish with the app key): the command again makes the repository whole and devices update",
          arguments: ["delegate", "publish"])
    func killedAfterDelegatedMetadata(_ command: String) async throws {
        if let missing = Nginx.missing { Issue.record(Comment(rawValue: "skipped: \(missing)")); return }
        let scene = try await Scene()
        for name in ["signing", "sample"] { try await scene.expectSuccess(["keygen", "--out", scene.key(name)]) }
        try await scene.publish("sample", "1.0.0", key: "signing")
        #expect(try await scene.sync("sample")["result"] as? String == "updated")
        let delegate = ["delegate", "--out", scene.out, "--app", "sample", "--app-key", scene.key("sample"), "--key", scene.key("signing")]
        let publish = [
            "publish", "--app", "sample", "--version", "1.1.0", "--source", F.sampleApp("1.1.0"), "--out", scene.out,
            "--key", scene.key("sample"), "--snapshot-key", scene.key("signing"),
        ]
        if command == "publish" { try await scene.expectSuccess(delegate) }
        let before = try scene.chain().timestamp.metadata.version
        let crashed = try await scene.publisher(command == "delegate" ? delegate : publish, environment: ["OFFLINE_PUBLISH_CRASH_AT": "after-delegated-metadata"])
        #expect(crashed.signaled && crashed.status == SIGKILL, "\(command) never reached after-delegated-metadata: \(crashed.stderr)")
        // Nothing published yet: the timestamp devices read is the one from before.
        #expect(try scene.chain().timestamp.metadata.version == before)
        #expect(try await scene.sync("sample")["version"] as? String == "1.0.0")

        if command == "delegate" {
            try await scene.expectSuccess(delegate)
            try await scene.publish("sample", "1.1.0", key: "sample", snapshotKey: "signing")
        } else {
            // The release is committed (state.json); the next verb with the app key publishes its metadata.
            try await scene.expectSuccess(["set", "--app", "sample", "--out", scene.out, "--rollout", "90", "--key", scene.key("sample"), "--snapshot-key", scene.key("signing")])
        }
        #expect(try scene.delegated("sample").targets.targets.keys.contains("sample/1.1.0.zip.gz"))
        let updated = try await scene.sync("sample")
        #expect(updated["result"] as? String == "updated" && updated["version"] as? String == "1.1.0", "\(updated)")
    }

    /// A repository written here with `TUFSigner` (one key for every role): the top-level
    /// targets delegate `sample/*` to `r1`, each `rN` delegates it to `rN+1` up to `depth`
    /// (and `rDepth` back to `r1` when `cycle`); only `rListed` lists the app's files.
    static func chainRepository(_ dir: TemporaryDirectory, depth: Int, listed: Int?, cycle: Bool) throws -> String {
        let published = try TUFInteropTests.unsignedSample(dir), repo = dir.file("repo")
        try FileManager.default.createDirectory(atPath: "\(repo)/metadata", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: "\(repo)/sample", withIntermediateDirectories: true)
        var files: [String: StrictJSON] = [:]
        for name in ["manifest.json", "1.0.0.zip.gz"] {
            let digest = try PublishFileWriter.digest(of: "\(published)/sample/\(name)")
            for copy in [name, "\(digest.sha256).\(name)"] {
                try FileManager.default.copyItem(atPath: "\(published)/sample/\(name)", toPath: "\(repo)/sample/\(copy)")
            }
            files["sample/\(name)"] = TUFTargetFile(length: digest.size, sha256: digest.sha256).json
        }
        let key = SigningKey.generate(), tufKey = TUFSigner.key(key)
        let expires = Date().addingTimeInterval(86_400)
        func write(_ signed: [String: StrictJSON], _ name: String) throws {
            try TUFSigner.file(signed, keys: [key]).write(to: URL(fileURLWithPath: "\(repo)/metadata/\(name)"))
        }
        func targets(_ listed: [String: StrictJSON], delegatingTo child: String?) -> [String: StrictJSON] {
            var signed = TUFSigner.common(type: "targets", version: 1, expires: expires)
            signed["targets"] = .object(listed)
            if let child {
                signed["delegations"] = TUFDelegations(keys: [tufKey.keyID: tufKey], roles: [
                    TUFDelegatedRole(name: child, role: TUFRole(keyIDs: [tufKey.keyID], threshold: 1), terminating: false, paths: ["sample/*"]),
                ]).json
            }
            return signed
        }
        try write(TUFRepository.newRoot(keys: TUFKeys(all: key), expires: expires), "1.root.json")
        try write(targets([:], delegatingTo: "r1"), "1.targets.json")
        var meta: [String: StrictJSON] = ["targets.json": TUFMetaFile(version: 1).json]
        for n in 1...depth {
            let child = n < depth ? "r\(n + 1)" : cycle ? "r1" : nil
            try write(targets(n == listed ? files : [:], delegatingTo: child), "1.r\(n).json")
            meta["r\(n).json"] = TUFMetaFile(version: 1).json
        }
        var snapshot = TUFSigner.common(type: "snapshot", version: 1, expires: expires)
        snapshot["meta"] = .object(meta)
        try write(snapshot, "1.snapshot.json")
        var timestamp = TUFSigner.common(type: "timestamp", version: 1, expires: expires)
        timestamp["meta"] = .object(["snapshot.json": TUFMetaFile(version: 1).json])
        try write(timestamp, "timestamp.json")
        return repo
    }

    @Test("the search is bounded: a target 32 delegations deep is found, 33 deep is not (target-unlisted, r33 never fetched); a cycle visits each role once",
          arguments: [(32, false), (33, false), (0, true)])
    func searchIsBounded(_ listed: Int, _ cycle: Bool) async throws {
        if let missing = Nginx.missing { Issue.record(Comment(rawValue: "skipped: \(missing)")); return }
        let dir = TemporaryDirectory("tuf-delegation-chain")
        let repo = try Self.chainRepository(dir, depth: cycle ? 3 : 40, listed: cycle ? nil : listed, cycle: cycle)
        let nginx = try await Nginx(server: "root \(repo);")
        defer { nginx.stop() }
        let report = try await TUFInteropTests.trustedSync(device: dir.file("device"), base: nginx.baseURL, root: "\(repo)/metadata/1.root.json")
        let fetched = nginx.accessLog().map(\.path).filter { $0.hasPrefix("/metadata/1.r") }
        if listed == 32 {
            #expect(report["result"] as? String == "updated", "\(report)")
            #expect(fetched.count == 32 && fetched.last == "/metadata/1.r32.json", "\(fetched)")
        } else {
            #expect(report["result"] as? String == "failed" && report["errorCode"] as? String == "target-unlisted", "\(report)")
            #expect(fetched == (1...(cycle ? 3 : 32)).map { "/metadata/1.r\($0).json" }, "\(fetched)")
            #expect(Store(root: dir.file("device")).active("sample") == nil)
        }
    }
}
