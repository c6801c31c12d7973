import Foundation
import Testing
import OfflineAgent
import OfflinePublish
import TestSupport

/// `offline-publish publish` as an operator meets it: the trial request it writes, and
/// the refusals that stop a package no device could use (no whitelist) or an unsigned
/// one nobody asked for.
@Suite("publish: trials and refusals")
struct PublishCommandTrialTests {
    static func publish(_ out: String, _ version: String, _ extra: [String]) async throws -> CLI.Result {
        try await CLI.run(
            ["publish", "--app", "sample", "--version", version, "--source", PublishFixtures.sampleApp(version), "--out", out] + extra,
            executable: CLI.publisher)
    }

    static func manifest(_ out: String) throws -> Manifest {
        try Manifest.decode(try Data(contentsOf: URL(fileURLWithPath: "\(out)/sample/manifest.json")))
    }

    @Test("--trial-launches N writes trialLaunches into this version's manifest only; without it the field is absent")
    func trialRequest() async throws {
        let scratch = TemporaryDirectory("publish-trial")
        let out = scratch.file("out")
        let whitelist = ["--whitelist", "https://h5.example.com/sample/", "--unsigned"]
        let first = try await Self.publish(out, "1.0.0", whitelist + ["--trial-launches", "3"])
        #expect(first.status == 0, "\(first.stderr)")
        #expect(try Self.manifest(out).trialLaunches == 3)
        let body = try String(contentsOfFile: "\(out)/sample/manifest.json", encoding: .utf8)
        #expect(body.contains("\"trialLaunches\" : 3"), "\(body)")
        // The next version asks for itself: the request is not kept.
        let second = try await Self.publish(out, "1.1.0", ["--unsigned"])
        #expect(second.status == 0, "\(second.stderr)")
        #expect(try Self.manifest(out).trialLaunches == nil)
        #expect(!(try String(contentsOfFile: "\(out)/sample/manifest.json", encoding: .utf8)).contains("trialLaunches"))
        let bad = try await Self.publish(out, "1.2.0", ["--unsigned", "--trial-launches", "-1"])
        #expect(bad.status == 64, "\(bad.stderr)")
    }

    @Test("an empty whitelist is refused (exit 64), naming the flag; nothing is written")
    func emptyWhitelist() async throws {
        let scratch = TemporaryDirectory("publish-whitelist")
        let out = scratch.file("out")
        let result = try await Self.publish(out, "1.0.0", ["--unsigned"])
        #expect(result.status == 64, "\(result.stderr)")
        #expect(result.stderr.contains("no whitelist: devices would install sample 1.0.0 and serve none of it; give --whitelist URL_PREFIX"), "\(result.stderr)")
        #expect(!FileManager.default.fileExists(atPath: "\(out)/sample/state.json"))
    }

    @Test("without --key publish asks for --unsigned; both together are refused")
    func unsignedMustBeSaid() async throws {
        let scratch = TemporaryDirectory("publish-unsigned")
        let out = scratch.file("out")
        let whitelist = ["--whitelist", "https://h5.example.com/sample/"]
        let refused = try await Self.publish(out, "1.0.0", whitelist)
        #expect(refused.status == 64, "\(refused.stderr)")
        #expect(refused.stderr.contains("no --key: give --key FILE (offline-publish keygen makes one) to sign the manifest, or --unsigned"), "\(refused.stderr)")
        #expect(!FileManager.default.fileExists(atPath: "\(out)/sample"))
        let key = scratch.file("signing.key")
        #expect(try await CLI.run(["keygen", "--out", key], executable: CLI.publisher).status == 0)
        #expect(try await Self.publish(out, "1.0.0", whitelist + ["--key", key, "--unsigned"]).status == 64)
        let signed = try await Self.publish(out, "1.0.0", whitelist + ["--key", key])
        #expect(signed.status == 0, "\(signed.stderr)")
        #expect(FileManager.default.fileExists(atPath: "\(out)/sample/manifest.json.sig"))
    }
}
