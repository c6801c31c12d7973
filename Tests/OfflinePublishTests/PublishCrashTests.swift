import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif
@testable import OfflineAgent
@testable import OfflinePublish
import TestSupport

/// `kill -9` of a verb at every one of its steps (`OFFLINE_PUBLISH_CRASH_AT`): what is
/// left is the old revision or the new one, never a mix, and an `offline-server` start or
/// the next verb makes the directory exactly that revision again, with every revision
/// in `history`.
@Suite("Publish crash safety")
struct PublishCrashTests {
    typealias F = PublishFixtures

    /// A verb as run from the command line, the steps it passes, and what its commit looks like.
    struct Verb: Sendable, CustomStringConvertible {
        var name: String
        var arguments: [String]
        var steps: [PublishStep]
        var isNew: @Sendable (PublishState) -> Bool
        var description: String { name }
    }

    /// The steps of a verb on an app that is not delegated (`TUFDelegationTests` kills the others).
    static let appSteps = PublishStep.allCases.filter { ![.afterDelegatedMetadata, .afterRolloutFile].contains($0) }

    static let verbs = [
        Verb(
            name: "stage", arguments: ["stage", "--percent", "0", "--reason", "halt"],
            steps: appSteps.filter { $0 != .afterFileLinked }) { $0.stage == 0 },
        Verb(
            name: "publish", arguments: ["publish", "--version", "1.2.0", "--source", F.sampleApp("1.2.0")],
            steps: appSteps) { $0.latest == Version("1.2.0")! },
    ]

    enum Repair: String, CaseIterable, Sendable { case serverStart = "server start", nextVerb = "next verb" }

    @Test("a verb killed at any step leaves the old or the new revision, which a server start or the next verb makes whole",
          arguments: verbs, Repair.allCases)
    func killedAtEveryStep(verb: Verb, repair: Repair) async throws {
        let server = try #require(F.builtExecutable("offline-server"), "offline-server is not built")
        for step in verb.steps {
            let s = try PublishLockTests.staged()
            defer { F.cleanUp(s.out) }
            let base = ["--app", "sample", "--out", s.out, "--key", s.keyFile]
            let old = try PublishLockTests.state(s.out)

            let crashed = try PublishProcess(
                s.publisher, verb.arguments + base, environment: ["OFFLINE_PUBLISH_CRASH_AT": step.rawValue], logs: s.out)
            let result = await crashed.wait()
            #expect(result.signaled && result.status == SIGKILL, "\(verb) never reached \(step.rawValue): \(result) \(crashed.stderr)")

            // What a crash leaves: the old revision or the new one, nothing between.
            let left = try PublishLockTests.state(s.out)
            let committed = verb.isNew(left)
            if committed {
                #expect(left.revisions?.dropLast() == old.revisions?[...], "\(step.rawValue): revisions lost")
            } else {
                #expect(left == old, "\(step.rawValue): state.json is neither the old nor the new one")
            }

            switch repair {
            case .serverStart:
                let started = try PublishProcess(server, ["--dir", s.out, "--port", "0", "--no-reports"], logs: s.out)
                defer { started.stop() }
                #expect(await PublishProcess.poll { started.stdout.contains("listening on") || !started.process.isRunning }, "\(started.stderr)")
                kill(started.pid, SIGTERM)
                _ = await started.wait()
                #expect(try PublishLockTests.state(s.out) == left, "\(step.rawValue): repair changed the committed state")
                try Self.expectWhole(s.out, key: s.key, step: step)
            case .nextVerb:
                let next = try PublishProcess(s.publisher, ["set", "--rollout", "90", "--reason", "after"] + base, logs: s.out)
                #expect(await next.wait().status == 0, "\(step.rawValue): \(next.stderr)")
                let after = try PublishLockTests.state(s.out)
                #expect(after.revisions?.dropLast() == left.revisions?[...], "\(step.rawValue): history lost a revision")
                #expect(verb.isNew(after) == committed && after.rollout == 90)
                try Self.expectWhole(s.out, key: s.key, step: step)
            }
        }
    }

    @Test("a first publish killed at any step leaves no app or a whole one; a server start removes its staging directory")
    func firstPublishKilled() async throws {
        let publisher = try #require(F.builtExecutable("offline-publish"), "offline-publish is not built")
        let server = try #require(F.builtExecutable("offline-server"), "offline-server is not built")
        for step in [PublishStep.afterRead, .afterStaging, .beforeCommit, .afterCommit] {
            let out = try F.temporaryDirectory("first")
            defer { F.cleanUp(out) }
            let crashed = try PublishProcess(
                publisher,
                ["publish", "--app", "sample", "--version", "1.0.0", "--source", F.sampleApp("1.0.0"), "--out", out, "--unsigned",
                 "--whitelist", "https://h5.example.com/sample/"],
                environment: ["OFFLINE_PUBLISH_CRASH_AT": step.rawValue], logs: out)
            let result = await crashed.wait()
            #expect(result.signaled, "\(step.rawValue) never reached: \(crashed.stderr)")
            let committed = FileManager.default.fileExists(atPath: "\(out)/sample")
            #expect(committed == (step == .afterCommit), "\(step.rawValue)")
            if committed { #expect(try PublishState.load(appDirectory: "\(out)/sample")?.latest == Version("1.0.0")) }

            let started = try PublishProcess(server, ["--dir", out, "--port", "0", "--no-reports"], logs: out)
            defer { started.stop() }
            #expect(await PublishProcess.poll { started.stdout.contains("listening on") || !started.process.isRunning }, "\(started.stderr)")
            kill(started.pid, SIGTERM)
            _ = await started.wait()
            let left = try FileManager.default.contentsOfDirectory(atPath: out).filter { $0.hasPrefix(".publish-") }
            #expect(left.isEmpty, "\(step.rawValue): \(left)")
        }
    }

    /// The app directory is exactly its committed revision: a signed `manifest.json` (and
    /// `.sig`) describing `state.json`, every file it names, no file of an undone version,
    /// no staging directory.
    static func expectWhole(_ out: String, key: SigningKey, step: PublishStep, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let app = "\(out)/sample"
        let state = try PublishLockTests.state(out)
        let manifest = try PublishLockTests.manifest(out, key: key)
        #expect(manifest.version == state.latest && manifest.stage == state.stage && manifest.rollout == state.rollout,
                "\(step.rawValue): manifest.json is not state.json's", sourceLocation: sourceLocation)
        let file = try Data(contentsOf: URL(fileURLWithPath: "\(app)/manifest.json"))
        let signature = try String(contentsOfFile: "\(app)/manifest.json.sig", encoding: .utf8)
        #expect(throws: Never.self, "\(step.rawValue): the .sig is not manifest.json's", sourceLocation: sourceLocation) {
            try ManifestSignature.verify(signature.trimmingCharacters(in: .whitespacesAndNewlines), of: file, with: key.key.publicKey)
        }
        let names = Set(try FileManager.default.contentsOfDirectory(atPath: app))
        let versions = Set(state.versions.map(\.version))
        for release in state.versions {
            #expect(names.contains(release.packageFile) && names.contains(release.gzipFile), sourceLocation: sourceLocation)
        }
        for listed in names {
            #expect(!listed.hasPrefix(".publish-"), "\(step.rawValue): staging left: \(listed)", sourceLocation: sourceLocation)
            // A TUF target's hash-prefixed copy (`<sha256>.NAME`) is judged by NAME.
            let parts = listed.split(separator: ".", maxSplits: 1)
            let name = parts.count == 2 && parts[0].count == 64 && parts[0].allSatisfy(\.isHexDigit) ? String(parts[1]) : listed
            let version = name.hasSuffix(".zip.gz") ? String(name.dropLast(7))
                : name.hasSuffix(".zip") ? String(name.dropLast(4))
                : name.hasSuffix(".bsdiff") ? String(name.dropLast(7).split(separator: "-").last ?? "") : nil
            if let version {
                #expect(Version(version).map(versions.contains) == true, "\(step.rawValue): \(name) of an undone version", sourceLocation: sourceLocation)
            }
        }
        let outNames = try FileManager.default.contentsOfDirectory(atPath: out)
        #expect(!outNames.contains { $0.hasPrefix(".publish-") }, "\(step.rawValue): \(outNames)", sourceLocation: sourceLocation)
    }
}
