import Foundation
import Testing
@testable import OfflineAgent
@testable import OfflinePublish
import TestSupport

/// The verbs on a live release (`stage`, `set`, `revert`, `promote`, `history`): what
/// they change, and that each refuses what devices would refuse, naming the value,
/// with the publish directory byte for byte as it was.
@Suite("Release verbs")
struct ReleaseVerbTests {
    typealias F = PublishFixtures

    /// A published app (1.0.0, 1.1.0) signed with `key`, in a fresh directory.
    static func published(key: SigningKey? = SigningKey.generate(), expires: PublishOptions.Expiry = .keep) throws -> (out: String, key: SigningKey?) {
        let out = try F.temporaryDirectory()
        for version in ["1.0.0", "1.1.0"] {
            var options = PublishOptions(
                app: "sample", version: Version(version)!, sourceDirectory: F.sampleApp(version), publishDirectory: out,
                whitelist: ["https://h5.example.com/sample/"], expires: expires, signingKey: key)
            options.now = F.fixedPublishTime
            _ = try Publisher.publish(options)
        }
        return (out, key)
    }

    /// `body` throws a usage error whose reason contains `text`, and leaves `out` as it was.
    static func expectRefused(
        _ out: String, _ text: String, sourceLocation: SourceLocation = #_sourceLocation, _ body: () throws -> Void
    ) {
        let before = F.tree(out)
        do {
            try body()
            Issue.record("not refused (expected '\(text)')", sourceLocation: sourceLocation)
        } catch let error as PublishError {
            #expect(error.code == .usage, "\(error)", sourceLocation: sourceLocation)
            #expect(error.reason.contains(text), "\(error.reason)", sourceLocation: sourceLocation)
        } catch {
            Issue.record("unexpected \(error)", sourceLocation: sourceLocation)
        }
        #expect(F.tree(out) == before, "the publish directory changed", sourceLocation: sourceLocation)
    }

    static func manifest(_ out: String) throws -> Manifest {
        let file = try Data(contentsOf: URL(fileURLWithPath: "\(out)/sample/manifest.json"))
        return try Manifest.decode(try #require(try ManifestEnvelope.open(file)).manifest)
    }

    @Test("stage re-signs the manifest with the new stage, replaces a schedule and records a revision")
    func stageChanges() throws {
        let (out, key) = try Self.published()
        defer { F.cleanUp(out) }
        let state = try ReleaseEditor.stage(app: "sample", publishDirectory: out, percent: 0, key: key, reason: "crash reports")
        #expect(state.stage == 0)
        let manifest = try Self.manifest(out)
        #expect(manifest.stage == 0 && manifest.format == 2 && manifest.version == Version("1.1.0"))
        #expect(!manifest.admits(bucket: 1, at: Date()))
        let file = try Data(contentsOf: URL(fileURLWithPath: "\(out)/sample/manifest.json"))
        let envelope = try #require(try ManifestEnvelope.open(file))
        try ManifestSignature.verify(try #require(envelope.signature), of: envelope.manifest, with: try ManifestSignature.publicKey(base64: key!.publicKeyBase64))
        let sig = try String(contentsOfFile: "\(out)/sample/manifest.json.sig", encoding: .utf8)
        try ManifestSignature.verify(sig, of: file, with: try ManifestSignature.publicKey(base64: key!.publicKeyBase64))
        let last = try #require(state.revisions?.last)
        #expect(last.verb == "stage" && last.reason == "stage 100% -> 0% (halted): crash reports")
        #expect(try ReleaseEditor.history(app: "sample", publishDirectory: out).revisions.map(\.verb) == ["publish", "publish", "stage"])
    }

    @Test("stage refuses a percent outside 0…100, an unknown app, a missing or wrong key, a passed expiry")
    func stageRefusals() throws {
        let (out, key) = try Self.published(expires: .at(Date().addingTimeInterval(3600)))
        defer { F.cleanUp(out) }
        Self.expectRefused(out, "stage 101") { try ReleaseEditor.stage(app: "sample", publishDirectory: out, percent: 101, key: key) }
        Self.expectRefused(out, "stage -1") { try ReleaseEditor.stage(app: "sample", publishDirectory: out, percent: -1, key: key) }
        Self.expectRefused(out, "app 'other' was never published") { try ReleaseEditor.stage(app: "other", publishDirectory: out, percent: 5, key: key) }
        Self.expectRefused(out, "give --key") { try ReleaseEditor.stage(app: "sample", publishDirectory: out, percent: 5, key: nil) }
        Self.expectRefused(out, "is not the key") {
            try ReleaseEditor.stage(app: "sample", publishDirectory: out, percent: 5, key: SigningKey.generate())
        }
        Self.expectRefused(out, "has already passed") {
            try ReleaseEditor.stage(app: "sample", publishDirectory: out, percent: 5, key: key, now: Date().addingTimeInterval(7200))
        }
    }

    @Test("set changes rollout, miniVersion, expires, network type, whitelist and fallback without a new version")
    func setChanges() throws {
        let (out, key) = try Self.published()
        defer { F.cleanUp(out) }
        let expires = Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down) + 7 * 86_400)
        try ReleaseEditor.set(app: "sample", publishDirectory: out, settings: ReleaseSettings(
            rollout: 30, miniVersion: Version("1.1.0"), expires: .at(expires), networkType: .wifi,
            whitelist: ["https://h5.example.com/other/"], fallback: "index.html"), key: key)
        let manifest = try Self.manifest(out)
        #expect(manifest.rollout == 30 && manifest.miniVersion == Version("1.1.0") && manifest.networkType == .wifi)
        #expect(manifest.expires == expires && manifest.whitelist == ["https://h5.example.com/other/"] && manifest.fallback == "index.html")
        #expect(manifest.version == Version("1.1.0"))
        let state = try #require(try PublishState.load(appDirectory: "\(out)/sample"))
        #expect(state.versions.count == 2)
        #expect(state.revisions?.last?.reason.hasPrefix("set rollout 100 -> 30, miniVersion 1.0.0 -> 1.1.0") == true)
    }

    @Test("set refuses nothing to set, a bad rollout, a mini version above the latest, a past expiry, bad whitelist and fallback")
    func setRefusals() throws {
        let (out, key) = try Self.published()
        defer { F.cleanUp(out) }
        func set(_ settings: ReleaseSettings, key: SigningKey? = key) throws {
            try ReleaseEditor.set(app: "sample", publishDirectory: out, settings: settings, key: key)
        }
        Self.expectRefused(out, "nothing to set") { try set(ReleaseSettings()) }
        Self.expectRefused(out, "rollout 101") { try set(ReleaseSettings(rollout: 101)) }
        Self.expectRefused(out, "mini version 2.0.0 is above the latest version 1.1.0") { try set(ReleaseSettings(miniVersion: Version("2.0.0"))) }
        Self.expectRefused(out, "has already passed") { try set(ReleaseSettings(expires: .at(Date().addingTimeInterval(-1)))) }
        Self.expectRefused(out, "'ftp://h5.example.com/' is not an absolute http(s) URL") {
            try set(ReleaseSettings(whitelist: ["ftp://h5.example.com/"]))
        }
        Self.expectRefused(out, "empty whitelist") { try set(ReleaseSettings(whitelist: [])) }
        Self.expectRefused(out, "fallback 'missing.html' is not a file of the package of 1.1.0") { try set(ReleaseSettings(fallback: "missing.html")) }
        Self.expectRefused(out, "fallback '../x' must be a normalised relative path") { try set(ReleaseSettings(fallback: "../x")) }
        Self.expectRefused(out, "give --key") { try set(ReleaseSettings(rollout: 5), key: nil) }
    }

    @Test("revert publishes the earlier package byte for byte as the next patch number, with patches from the last versions")
    func revertChanges() throws {
        let (out, key) = try Self.published()
        defer { F.cleanUp(out) }
        let result = try ReleaseEditor.revert(app: "sample", publishDirectory: out, to: Version("1.0.0")!, key: key)
        #expect(result.release.version == Version("1.1.1"))
        #expect(FileManager.default.contents(atPath: "\(out)/sample/1.1.1.zip") == FileManager.default.contents(atPath: "\(out)/sample/1.0.0.zip"))
        #expect(result.patches.map(\.from) == [Version("1.0.0")!, Version("1.1.0")!])
        #expect(try Self.manifest(out).packageSha256 == result.state.versions.first?.sha256)
        #expect(ReleaseEditor.nextPatch(after: Version("2")!) == Version("2.0.1"))
        #expect(ReleaseEditor.nextPatch(after: Version("1.2.3.4")!) == Version("1.2.3.5"))
    }

    @Test("revert refuses the latest version, an unknown version, a new version not above the latest, a missing key")
    func revertRefusals() throws {
        let (out, key) = try Self.published()
        defer { F.cleanUp(out) }
        Self.expectRefused(out, "1.1.0 is the latest already") {
            try ReleaseEditor.revert(app: "sample", publishDirectory: out, to: Version("1.1.0")!, key: key)
        }
        Self.expectRefused(out, "version 0.9.0 was never published") {
            try ReleaseEditor.revert(app: "sample", publishDirectory: out, to: Version("0.9.0")!, key: key)
        }
        Self.expectRefused(out, "new version 1.0.5 is not greater than the latest published 1.1.0") {
            try ReleaseEditor.revert(app: "sample", publishDirectory: out, to: Version("1.0.0")!, newVersion: Version("1.0.5"), key: key)
        }
        Self.expectRefused(out, "give --key") {
            try ReleaseEditor.revert(app: "sample", publishDirectory: out, to: Version("1.0.0")!, key: nil)
        }
    }

    @Test("promote refuses an unknown version, one not above the target's latest, the same directory, tampered bytes")
    func promoteRefusals() throws {
        let (beta, key) = try Self.published()
        let (production, _) = try Self.published(key: key)
        defer { F.cleanUp(beta); F.cleanUp(production) }
        Self.expectRefused(production, "version 1.5.0 was never published") {
            try ReleaseEditor.promote(app: "sample", version: Version("1.5.0")!, from: beta, to: production, key: key)
        }
        Self.expectRefused(production, "version 1.1.0 is not greater than the latest published 1.1.0") {
            try ReleaseEditor.promote(app: "sample", version: Version("1.1.0")!, from: beta, to: production, key: key)
        }
        Self.expectRefused(beta, "the same publish directory") {
            try ReleaseEditor.promote(app: "sample", version: Version("1.1.0")!, from: beta, to: beta, key: key)
        }
        // A beta package whose bytes are not what its state.json says is never promoted.
        _ = try Publisher.publish({
            var options = PublishOptions(app: "sample", version: Version("1.2.0")!, sourceDirectory: F.sampleApp("1.2.0"),
                                         publishDirectory: beta, signingKey: key)
            options.now = F.fixedPublishTime
            return options
        }())
        let zip = "\(beta)/sample/1.2.0.zip"
        var bytes = try Data(contentsOf: URL(fileURLWithPath: zip))
        bytes[bytes.count / 2] ^= 0xFF
        try bytes.write(to: URL(fileURLWithPath: zip))
        let before = F.tree(production)
        #expect(throws: PublishError.self) {
            try ReleaseEditor.promote(app: "sample", version: Version("1.2.0")!, from: beta, to: production, key: key)
        }
        #expect(F.tree(production) == before)
    }

    @Test("publish --stage-schedule: parsed, carried with publishedAt, refused when it shrinks or mixes with --stage")
    func publishSchedule() throws {
        let out = try F.temporaryDirectory()
        defer { F.cleanUp(out) }
        #expect(ManifestStageStep.parseSchedule("5@0h,25@24h,100@3d") == [
            ManifestStageStep(afterSeconds: 0, percent: 5), ManifestStageStep(afterSeconds: 86_400, percent: 25),
            ManifestStageStep(afterSeconds: 259_200, percent: 100),
        ])
        for bad in ["", "5", "5@", "101@0h", "-5@0h", "5@1w", "5@0h,,", "5@-1h"] {
            #expect(ManifestStageStep.parseSchedule(bad) == nil, "\(bad)")
        }
        func options(_ schedule: String?, stage: Int? = nil) -> PublishOptions {
            var options = PublishOptions(app: "sample", version: Version("1.0.0")!, sourceDirectory: F.sampleApp("1.0.0"), publishDirectory: out)
            options.stageSchedule = schedule.flatMap(ManifestStageStep.parseSchedule)
            options.stage = stage
            options.now = F.fixedPublishTime
            return options
        }
        Self.expectRefused(out, "percent must not be below the step before") { _ = try Publisher.publish(options("50@0h,10@1h")) }
        Self.expectRefused(out, "afterSeconds must be above the step before") { _ = try Publisher.publish(options("10@1h,50@1h")) }
        Self.expectRefused(out, "cannot both be given") { _ = try Publisher.publish(options("10@0h", stage: 5)) }
        Self.expectRefused(out, "stage 101") { _ = try Publisher.publish(options(nil, stage: 101)) }
        _ = try Publisher.publish(options("5@0h,25@24h,100@72h"))
        let manifest = try Manifest.decode(try Data(contentsOf: URL(fileURLWithPath: "\(out)/sample/manifest.json")))
        #expect(manifest.publishedAt == F.fixedPublishTime && manifest.stageSchedule.count == 3 && manifest.stage == nil)
        #expect(manifest.currentStage(at: F.fixedPublishTime.addingTimeInterval(-1)) == 0)
        #expect(manifest.currentStage(at: F.fixedPublishTime) == 5)
        #expect(manifest.currentStage(at: F.fixedPublishTime.addingTimeInterval(86_400)) == 25)
        #expect(manifest.currentStage(at: F.fixedPublishTime.addingTimeInterval(1e9)) == 100)
    }

    @Test("the CLI verbs: refusals exit 64 naming the value with the directory unchanged; history lists revisions")
    func cliVerbs() async throws {
        guard let publisher = F.builtExecutable("offline-publish") else {
            Issue.record("offline-publish is not built")
            return
        }
        let (out, key) = try Self.published()
        defer { F.cleanUp(out) }
        let keyFile = "\(out)/key"
        try key!.write(to: keyFile)
        let base = ["--app", "sample", "--out", out, "--key", keyFile]
        let before = F.tree("\(out)/sample")
        for (arguments, text) in [
            (["stage", "--percent", "101"] + base, "stage 101"),
            (["set", "--expires", "soon"] + base, "'soon'"),
            (["set", "--expires", "0d"] + base, "--expires 0d is now"),
            (["set", "--network-type", "lte"] + base, "'lte'"),
            (["set", "--mini-version", "1.x"] + base, "'1.x'"),
            (["revert", "--to", "9.9.9"] + base, "9.9.9 was never published"),
            (["history", "--app", "other", "--out", out], "app 'other' was never published"),
            (["publish", "--app", "sample", "--out", out, "--key", keyFile, "--version", "2.0.0", "--source", F.sampleApp("1.3.0"),
              "--stage-schedule", "5@soon"], "'5@soon'"),
        ] {
            let result = try await F.run(publisher, arguments)
            #expect(result.status == 64, "\(arguments): \(result.stderr)")
            #expect(result.stderr.contains(text), "\(arguments): \(result.stderr)")
        }
        #expect(F.tree("\(out)/sample") == before)

        #expect(try await F.run(publisher, ["stage", "--percent", "25", "--reason", "canary"] + base).status == 0)
        let history = try await F.run(publisher, ["history", "--app", "sample", "--out", out])
        #expect(history.status == 0)
        #expect(history.stdout.contains("stage 25%") && history.stdout.contains("stage 100% -> 25%: canary"), "\(history.stdout)")
    }

    @Test("a failure while moving files in undoes the moves: manifest, signature and state as they were")
    func failedMoveRollsBack() throws {
        let (out, key) = try Self.published()
        defer { F.cleanUp(out) }
        let app = "\(out)/sample"
        // A directory where the .sig goes: its rename fails after manifest.json was moved in.
        try FileManager.default.removeItem(atPath: "\(app)/manifest.json.sig")
        try FileManager.default.createDirectory(atPath: "\(app)/manifest.json.sig/x", withIntermediateDirectories: true)
        let before = F.tree(app)
        #expect(throws: PublishError.self) { try ReleaseEditor.stage(app: "sample", publishDirectory: out, percent: 5, key: key) }
        #expect(F.tree(app) == before)
        #expect(try Self.manifest(out).stage == nil, "the old manifest is back")
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: app).filter { $0.hasPrefix(".publish-") }
        #expect(leftovers.isEmpty)
    }

    @Test("a hand-edited state.json whose schedule devices would refuse is refused before anything is served or written")
    func hostileStateSchedule() throws {
        let (out, key) = try Self.published()
        defer { F.cleanUp(out) }
        let path = "\(out)/sample/state.json"
        var object = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path))) as? [String: Any])
        object["stageSchedule"] = [["afterSeconds": 0, "percent": 50], ["afterSeconds": 10, "percent": 5]]
        try JSONSerialization.data(withJSONObject: object).write(to: URL(fileURLWithPath: path))
        let before = F.tree(out)
        #expect(throws: PublishError.self) { try PublishState.load(appDirectory: "\(out)/sample") }
        #expect(throws: PublishError.self) { try ReleaseEditor.stage(app: "sample", publishDirectory: out, percent: 5, key: key) }
        #expect(F.tree(out) == before)
    }
}

/// Epochs on the publisher: a higher epoch may go below the latest version, the epoch
/// never goes down, a version is never published twice, and the manifest carries it.
@Suite("Release epochs")
struct ReleaseEpochTests {
    typealias F = PublishFixtures
    typealias R = ReleaseVerbTests

    static func options(_ out: String, _ version: String, source: String = "1.0.0", key: SigningKey?, epoch: Int? = nil) -> PublishOptions {
        var options = PublishOptions(
            app: "sample", version: Version(version)!, sourceDirectory: F.sampleApp(source), publishDirectory: out,
            whitelist: ["https://h5.example.com/sample/"], signingKey: key)
        options.now = F.fixedPublishTime
        options.epoch = epoch
        return options
    }

    @Test("publish --epoch goes below the latest, keeps the epoch after, refuses a lower epoch or a version published before")
    func publishEpoch() throws {
        let (out, key) = try R.published()
        defer { F.cleanUp(out) }
        #expect(try R.manifest(out).epoch == 0)
        // Bytes of states and manifests from before epochs stay: no epoch field at 0.
        #expect(!String(decoding: try Data(contentsOf: URL(fileURLWithPath: "\(out)/sample/state.json")), as: UTF8.self).contains("epoch"))
        let lower = try Publisher.publish(Self.options(out, "1.0.5", key: key, epoch: 1))
        #expect(lower.state.epoch == 1 && lower.state.latest == Version("1.0.5"))
        // A patch goes up only: from 1.0.0, not from 1.1.0.
        #expect(lower.patches.map(\.from) == [Version("1.0.0")!])
        let manifest = try R.manifest(out)
        #expect(manifest.epoch == 1 && manifest.version == Version("1.0.5") && manifest.miniVersion <= manifest.version)
        // Kept: the next publish without --epoch is of epoch 1 and must rise within it.
        #expect(try Publisher.publish(Self.options(out, "1.0.6", key: key)).state.epoch == 1)
        R.expectRefused(out, "below the latest release's epoch 1") { _ = try Publisher.publish(Self.options(out, "2.0.0", key: key, epoch: 0)) }
        R.expectRefused(out, "was published already") { _ = try Publisher.publish(Self.options(out, "1.1.0", key: key, epoch: 2)) }
        R.expectRefused(out, "outside 0…999999999") { _ = try Publisher.publish(Self.options(out, "3.0.0", key: key, epoch: 1_000_000_000)) }
        do {
            _ = try Publisher.publish(Self.options(out, "1.0.1", key: key))
            Issue.record("a lower version in the same epoch was published")
        } catch let error as PublishError {
            #expect(error.reason.contains("--epoch 2"), "the refusal names the recovery: \(error.reason)")
        }
    }

    @Test("revert --new-epoch publishes the package as the next unpublished patch after it, one epoch up; a kept miniVersion above it is lowered")
    func revertNewEpoch() throws {
        let (out, key) = try R.published()
        defer { F.cleanUp(out) }
        var settings = ReleaseSettings()
        settings.miniVersion = Version("1.1.0")
        _ = try ReleaseEditor.set(app: "sample", publishDirectory: out, settings: settings, key: key)
        let result = try ReleaseEditor.revert(app: "sample", publishDirectory: out, to: Version("1.0.0")!, newEpoch: true, key: key)
        #expect(result.release.version == Version("1.0.1") && result.release.epoch == 1 && result.release.sha256 == result.state.versions[0].sha256)
        #expect(result.state.miniVersion == Version("1.0.1"))
        let manifest = try R.manifest(out)
        #expect(manifest.epoch == 1 && manifest.version == Version("1.0.1"))
        // Again: 1.0.1 is taken, so 1.0.2, epoch 2.
        let again = try ReleaseEditor.revert(app: "sample", publishDirectory: out, to: Version("1.0.0")!, newEpoch: true, key: key)
        #expect(again.release.version == Version("1.0.2") && again.release.epoch == 2)
        // A state whose epochs go down is refused whole (a hand edit devices would refuse).
        var state = again.state
        state.versions[state.versions.count - 1].epoch = 0
        #expect(throws: PublishError.self) { try state.check(path: nil) }
    }
}
