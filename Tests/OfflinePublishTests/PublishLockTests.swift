import Crypto
import Foundation
import Testing
@testable import OfflineAgent
@testable import OfflinePublish
import TestSupport

/// Two writers on one publish directory, really interleaved: one `offline-publish`
/// process is stopped between reading the state and writing it (`OFFLINE_PUBLISH_PAUSE_AT`)
/// while another verb, or auto-halt's `ReleaseEditor.halt`, runs. Nothing either did
/// may be lost.
@Suite("Publish directory lock")
struct PublishLockTests {
    typealias F = PublishFixtures

    /// A signed app (1.0.0, 1.1.0) being staged at 20 %, its key in `out/key`.
    static func staged() throws -> (out: String, key: SigningKey, keyFile: String, publisher: String) {
        let publisher = try #require(F.builtExecutable("offline-publish"), "offline-publish is not built")
        let out = try F.temporaryDirectory("lock")
        let key = SigningKey.generate()
        try F.publishSample(["1.0.0", "1.1.0"], to: out, key: key)
        try ReleaseEditor.stage(app: "sample", publishDirectory: out, percent: 20, key: key, now: F.fixedPublishTime)
        let keyFile = "\(out)/key"
        try key.write(to: keyFile)
        return (out, key, keyFile, publisher)
    }

    static func state(_ out: String) throws -> PublishState {
        try #require(try PublishState.load(appDirectory: "\(out)/sample"))
    }

    /// `manifest.json` as devices read it, its signature checked.
    static func manifest(_ out: String, key: SigningKey) throws -> Manifest {
        let file = try Data(contentsOf: URL(fileURLWithPath: "\(out)/sample/manifest.json"))
        let envelope = try #require(try ManifestEnvelope.open(file))
        try ManifestSignature.verify(try #require(envelope.signature), of: envelope.manifest, with: key.key.publicKey)
        return try Manifest.decode(envelope.manifest)
    }

    /// Starts `first` stopped after its read, runs `second` while it is stopped (it
    /// must wait for the lock, saying so), resumes `first`; both must succeed.
    static func interleave(_ s: (out: String, key: SigningKey, keyFile: String, publisher: String), first: [String], second: [String]) async throws {
        let a = try PublishProcess(s.publisher, first, environment: ["OFFLINE_PUBLISH_PAUSE_AT": "after-read"], logs: s.out)
        defer { a.stop() }
        try #require(await a.waitStopped(), "the first verb never reached its pause: \(a.stderr)")
        let b = try PublishProcess(s.publisher, second, logs: s.out)
        defer { b.stop() }
        // With a lock the second verb waits and says for whom; without one it just runs.
        await PublishProcess.poll { b.stderr.contains("waiting for") || !b.process.isRunning }
        if b.process.isRunning {
            #expect(b.stderr.contains("pid \(a.pid)"), "the wait names the holder: \(b.stderr)")
        }
        a.resume()
        let first = await a.wait(), second = await b.wait()
        #expect(first.status == 0 && !first.signaled, "\(first): \(a.stderr)")
        #expect(second.status == 0 && !second.signaled, "\(second): \(b.stderr)")
    }

    @Test("a halt made while a `set` was between its read and its write survives the set, in state, manifest and history")
    func haltSurvivesStaleSet() async throws {
        let s = try Self.staged()
        defer { F.cleanUp(s.out) }
        let base = ["--app", "sample", "--out", s.out, "--key", s.keyFile]
        try await Self.interleave(s, first: ["set", "--rollout", "50"] + base, second: ["stage", "--percent", "0", "--reason", "halt"] + base)

        let state = try Self.state(s.out)
        #expect(state.stage == 0, "the halt was lost: stage \(String(describing: state.stage))")
        #expect(state.rollout == 50, "the set was lost")
        let manifest = try Self.manifest(s.out, key: s.key)
        #expect(manifest.stage == 0 && manifest.rollout == 50)
        let reasons = (state.revisions ?? []).map(\.reason)
        #expect(reasons.contains { $0.contains("-> 0% (halted): halt") }, "history lost the halt: \(reasons)")
        #expect(reasons.contains { $0.contains("rollout 100 -> 50") }, "\(reasons)")
    }

    @Test("a halt by the halt key, stopped between reading the manifest and writing rollout.json while a `set` runs, is still in force after both")
    func haltKeyHaltSurvivesSet() async throws {
        let s = try Self.staged()
        defer { F.cleanUp(s.out) }
        let haltKey = SigningKey.generate(), haltFile = "\(s.out)/halt-key"
        try haltKey.write(to: haltFile)
        try TUFRepository.delegate(
            app: "sample", publishDirectory: s.out, appKey: haltKey, halt: true,
            keys: TUFKeys(targets: [s.key], snapshot: [s.key], timestamp: [s.key]), now: Date())
        let base = ["--app", "sample", "--out", s.out]
        try await Self.interleave(
            s, first: ["halt", "--key", haltFile, "--snapshot-key", s.keyFile, "--reason", "rule tripped"] + base,
            second: ["set", "--rollout", "50", "--key", s.keyFile] + base)

        // Either order is fine: the halt after the set narrows the set's manifest; the set
        // after the halt keeps it in the state. A rollout.json naming the manifest the set
        // replaced halts nothing.
        let state = try Self.state(s.out)
        let narrowed = TUFRepository.rolloutStage(app: "sample", publishDirectory: s.out)
        #expect(
            state.stageInForce(at: Date()) == 0 || narrowed == 0,
            "the halt was lost: stage \(String(describing: state.stage)), rollout.json \(String(describing: narrowed))")
        #expect(state.rollout == 50, "the set was lost")
    }

    @Test("a `delegate` run while a `set` is about to commit waits for it: the set commits and signs, and the app's new role lists the set's manifest")
    func delegateWaitsForVerb() async throws {
        let s = try Self.staged()
        defer { F.cleanUp(s.out) }
        let appKey = SigningKey.generate(), appFile = "\(s.out)/app-key"
        try appKey.write(to: appFile)
        let set = try PublishProcess(
            s.publisher, ["set", "--rollout", "50", "--app", "sample", "--out", s.out, "--key", s.keyFile],
            environment: ["OFFLINE_PUBLISH_PAUSE_AT": "before-commit"], logs: s.out)
        defer { set.stop() }
        try #require(await set.waitStopped(), "the set never reached its pause: \(set.stderr)")
        let delegate = try PublishProcess(
            s.publisher, ["delegate", "--out", s.out, "--app", "sample", "--app-key", appFile, "--key", s.keyFile], logs: s.out)
        defer { delegate.stop() }
        await PublishProcess.poll { delegate.stderr.contains("waiting for") || !delegate.process.isRunning }
        set.resume()
        let setResult = await set.wait(), delegateResult = await delegate.wait()
        #expect(setResult.status == 0 && !setResult.signaled, "the set failed after its commit: \(set.stderr)")
        #expect(delegateResult.status == 0, "\(delegate.stderr)")
        #expect(try Self.state(s.out).rollout == 50)
        // What TUF devices check: the listed manifest is the one on disk.
        let manifest = try Data(contentsOf: URL(fileURLWithPath: "\(s.out)/sample/manifest.json"))
        let listed = TUFRepository.listing(of: "sample/manifest.json", in: TUFRepository.metadataDirectory(s.out))
        #expect(listed?.role == "sample" && listed?.target.sha256 == SHA256.hash(data: manifest).hex, "\(String(describing: listed))")
    }

    @Test("a `root commit` with a new targets key run while a `set` is about to commit waits for it: the set commits and signs, then the root lands")
    func rootCommitWaitsForVerb() async throws {
        let s = try Self.staged()
        defer { F.cleanUp(s.out) }
        let run = { (arguments: [String]) async throws in
            let result = try await CLI.run(arguments, executable: s.publisher)
            try #require(result.status == 0, "\(arguments): \(result.stderr)")
        }
        let proposal = "\(s.out)/root-next.json", online = "\(s.out)/online.key"
        try await run(["keygen", "--out", online])
        try await run(["root", "propose", "--out", s.out, "--file", proposal, "--targets-key", online + ".pub"])
        try await run(["root", "sign", "--file", proposal, "--key", s.keyFile])
        let set = try PublishProcess(
            s.publisher, ["set", "--rollout", "50", "--app", "sample", "--out", s.out, "--key", s.keyFile],
            environment: ["OFFLINE_PUBLISH_PAUSE_AT": "before-commit"], logs: s.out)
        defer { set.stop() }
        try #require(await set.waitStopped(), "the set never reached its pause: \(set.stderr)")
        let commit = try PublishProcess(s.publisher, ["root", "commit", "--out", s.out, "--file", proposal], logs: s.out)
        defer { commit.stop() }
        await PublishProcess.poll { commit.stderr.contains("waiting for") || !commit.process.isRunning }
        set.resume()
        let setResult = await set.wait(), commitResult = await commit.wait()
        #expect(setResult.status == 0 && !setResult.signaled, "the set failed after its commit: \(set.stderr)")
        #expect(commitResult.status == 0, "\(commit.stderr)")
        #expect(try Self.state(s.out).rollout == 50)
        // What TUF devices check: the listed manifest is the one on disk.
        let manifest = try Data(contentsOf: URL(fileURLWithPath: "\(s.out)/sample/manifest.json"))
        let listed = TUFRepository.listing(of: "sample/manifest.json", in: TUFRepository.metadataDirectory(s.out))
        #expect(listed?.target.sha256 == SHA256.hash(data: manifest).hex, "\(String(describing: listed))")
    }

    @Test("a publish made while a `stage` was between its read and its write keeps its version in state and manifest")
    func publishSurvivesStaleStage() async throws {
        let s = try Self.staged()
        defer { F.cleanUp(s.out) }
        let base = ["--app", "sample", "--out", s.out, "--key", s.keyFile]
        try await Self.interleave(
            s, first: ["stage", "--percent", "40"] + base,
            second: ["publish", "--version", "1.2.0", "--source", F.sampleApp("1.2.0"), "--stage", "5"] + base)

        let state = try Self.state(s.out)
        #expect(state.versions.map(\.version.description) == ["1.0.0", "1.1.0", "1.2.0"], "the published version was dropped")
        #expect(state.latest.description == "1.2.0")
        let manifest = try Self.manifest(s.out, key: s.key)
        #expect(manifest.version.description == "1.2.0")
        #expect(manifest.stage == 5, "the new version's own stage; the stage verb acted on 1.1.0 before it")
        let verbs = (state.revisions ?? []).map(\.verb)
        #expect(Array(verbs.suffix(2)) == ["stage", "publish"], "\(verbs)")
    }

    @Test("auto-halt's ReleaseEditor.halt waits a bounded time for a held lock, then fails naming the holder, changing nothing")
    func haltWaitIsBounded() async throws {
        let s = try Self.staged()
        defer { F.cleanUp(s.out) }
        let base = ["--app", "sample", "--out", s.out, "--key", s.keyFile]
        let a = try PublishProcess(s.publisher, ["set", "--rollout", "50"] + base, environment: ["OFFLINE_PUBLISH_PAUSE_AT": "after-read"], logs: s.out)
        defer { a.stop() }
        try #require(await a.waitStopped(), "the set never reached its pause: \(a.stderr)")
        let before = F.tree("\(s.out)/sample")
        do {
            try ReleaseEditor.halt(
                app: "sample", version: Version("1.1.0")!, publishDirectory: s.out, key: s.key, reason: "rule tripped",
                lockWait: .milliseconds(300))
            Issue.record("halted while another verb held the publish directory")
        } catch let error as PublishError {
            #expect(error.reason.contains("pid \(a.pid)") && error.reason.contains("set"), "\(error)")
        }
        #expect(F.tree("\(s.out)/sample") == before)

        // The CLI's bound: --lock-wait, one line naming the holder, exit 75 (try again later).
        let b = try PublishProcess(s.publisher, ["stage", "--percent", "0", "--lock-wait", "0.3"] + base, logs: s.out)
        defer { b.stop() }
        let result = await b.wait()
        #expect(result.status == 75, "\(result): \(b.stderr)")
        #expect(b.stderr.contains("pid \(a.pid)"), "\(b.stderr)")
        a.resume()
        #expect(await a.wait().status == 0, "\(a.stderr)")
        #expect(try Self.state(s.out).rollout == 50)
    }
}
