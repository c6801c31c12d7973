import Crypto
import Foundation
import Testing
@testable import OfflineAgent
import OfflinePublish
import TestSupport

/// The messages at the device's edges (issue 30): each names the right phase and the
/// way out, and keys fail closed and explain themselves.
@Suite("Device messages")
struct DeviceMessagesTests {
    static func sync(_ h: SyncHarness, _ extra: [String]) -> [String] {
        ["sync", "--root", h.root.path, "--app", "mall", "--manifest", h.origin.manifestURL.absoluteString] + extra
    }

    @Test("sync without a key refuses to run unless --allow-unsigned, as the config file does")
    func unsignedNeedsConsent() async throws {
        let h = try SyncHarness()
        h.origin.setManifest(h.full("1.0.0"))
        let refused = try await CLI.run(Self.sync(h, ["--json"]))
        #expect(refused.status == 64, "\(refused.stderr)")
        #expect(refused.stderr == "offline-agent: usage: no trusted key: give --public-key KEY (base64, or the file offline-publish keygen wrote beside the private key) to verify signed manifests, or --allow-unsigned to accept unsigned ones\n")
        #expect(h.origin.requests.isEmpty)
        let allowed = try await CLI.run(Self.sync(h, ["--json", "--allow-unsigned"]))
        #expect(CLI.json(allowed.stdout)?["result"] as? String == "updated", "\(allowed.stderr)")
    }

    @Test("a signature that does not verify names the trusted keys' fingerprints")
    func signatureNamesFingerprints() async throws {
        let h = try SyncHarness()
        let signer = Curve25519.Signing.PrivateKey(), trusted = Curve25519.Signing.PrivateKey()
        let body = [UInt8](try JSONSerialization.data(withJSONObject: h.full("1.0.0"), options: [.sortedKeys]))
        h.origin.setManifest(raw: body, headers: [("X-Offline-Signature", try signer.signature(for: body).base64EncodedString())])
        let key = trusted.publicKey.rawRepresentation.base64EncodedString()
        let result = try await CLI.run(Self.sync(h, ["--public-key", key]))
        #expect(result.status == 1)
        let fingerprint = try KeyFingerprint.of(base64: key)
        #expect(result.stderr.contains("manifest signature does not verify with any trusted key (trusted: \(fingerprint)); check that the device trusts the publisher's public key"), "\(result.stderr)")
    }

    @Test("a private key given as --public-key is refused, saying which file it is and which to give")
    func privateKeyRefused() async throws {
        let h = try SyncHarness()
        h.origin.setManifest(h.full("1.0.0"))
        let dir = TemporaryDirectory("private-key")
        let path = dir.file("signing.key")
        try SigningKey.generate().write(to: path)
        let result = try await CLI.run(Self.sync(h, ["--public-key", path]))
        #expect(result.status == 64, "\(result.stderr)")
        #expect(result.stderr == "offline-agent: usage: --public-key names a private key (its public key is \(path).pub): give \(path).pub, and keep the private key off devices (\(path))\n")
        #expect(h.origin.requests.isEmpty)
        #expect(try await CLI.run(Self.sync(h, ["--public-key", path + ".pub"])).status == 1)  // the right file: then the unsigned manifest is refused
    }

    @Test("config files: a syntax error gives line and column, a missing file its reason, a relative root the file's directory")
    func configMessages() async throws {
        let dir = TemporaryDirectory("config-messages")
        try FileManager.default.createDirectory(atPath: dir.path, withIntermediateDirectories: true)
        let file = dir.file("agent.json")
        try "{\n  \"root\": \"/var/lib/offline-agent\",\n  \"apps\": [\n    {\"app\": \"mall\" \"manifest\": \"http://x/\"}\n  ]\n}\n"
            .write(toFile: file, atomically: true, encoding: .utf8)
        for command in [["sync", "--config", file], ["check-config", file]] {
            let result = try await CLI.run(command)
            #expect(result.status == 64, "\(result.stderr)")
            #expect(result.stderr.hasPrefix("offline-agent: usage: config file is not valid JSON at line 4, column 20: "), "\(result.stderr)")
        }
        let missing = try await CLI.run(["check-config", dir.file("nope.json")])
        #expect(missing.stderr == "offline-agent: usage: cannot read config file: no such file (\(dir.file("nope.json")))\n", "\(missing.stderr)")
        try #"{"root": "data/agent", "allowUnsigned": true, "apps": [{"app": "mall", "manifest": "http://x/"}]}"#
            .write(toFile: file, atomically: true, encoding: .utf8)
        let relative = try await CLI.run(["check-config", file])
        #expect(relative.status == 64)
        #expect(relative.stderr.contains("root 'data/agent' is relative: give an absolute path (it is not read relative to the config file's directory \(dir.path), nor to the working directory)"), "\(relative.stderr)")
    }

    @Test("an unknown command is a usage error (64), also beside --help and --version", arguments: [
        ["publish", "--version"], ["publish", "--help"], ["publish"], ["sinc", "--root", "/r"],
    ])
    func unknownCommand(_ arguments: [String]) async throws {
        let result = try await CLI.run(arguments)
        #expect(result.status == 64, "\(arguments): \(result.stdout) \(result.stderr)")
        #expect(result.stdout.isEmpty)
        #expect(result.stderr.hasPrefix("offline-agent: usage: unknown command '\(arguments[0])' (commands: sync, status,"), "\(result.stderr)")
    }

    @Test("offline-publish: an unknown command is a usage error too, beside --version")
    func unknownPublishCommand() async throws {
        let result = try await CLI.run(["sync", "--version"], executable: CLI.publisher)
        #expect(result.status == 64 && result.stdout.isEmpty, "\(result.stdout) \(result.stderr)")
        #expect(result.stderr.hasPrefix("offline-publish: usage: unknown command 'sync' (commands: publish, keygen"), "\(result.stderr)")
    }

    @Test("rollback with nothing kept says lifecycle, not install, and what stays")
    func rollbackNothingKept() async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        let result = try await CLI.run(["rollback", "--root", h.root.path, "--app", "mall"])
        #expect(result.status == 1)
        #expect(result.stderr == "offline-agent: lifecycle: nothing to roll back to: no previous version of 'mall' is kept (or it is marked bad); 1.0.0 stays active (offline-agent mark-bad --app mall stops serving it offline)\n", "\(result.stderr)")
    }

    @Test("sync's known-bad line uses status's words: an active version that is bad is not said to stay in use")
    func knownBadWording() async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        let app = ["--root", h.root.path, "--app", "mall"]
        #expect(try await CLI.run(["mark-bad"] + app).status == 0)
        h.origin.setManifest(h.full("1.0.0"))
        let result = try await CLI.run(Self.sync(h, ["--allow-unsigned", "--force"]))
        #expect(result.status == 0)
        #expect(result.stderr == "mall: 1.0.0 is marked bad here and not installed; 1.0.0 is marked bad too: nothing of mall is used offline (offline-agent forget-bad --app mall clears the marks)\n", "\(result.stderr)")
        let status = try await CLI.run(["status"] + app)
        #expect(status.stdout.contains("not usable offline") && status.stdout.contains("bad: 1.0.0"), "\(status.stdout)")
    }
}
