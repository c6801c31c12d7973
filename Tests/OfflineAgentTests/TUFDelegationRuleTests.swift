import Crypto
import Foundation
import Testing
@testable import OfflineAgent
@testable import OfflinePublish
import TestSupport

/// The rules of delegated roles on bytes: which paths a role is trusted for (compared
/// with python-tuf's own `is_delegated_path`), what `delegations` may hold, and the
/// checks a delegated role's metadata passes before its targets count.
@Suite("TUF delegation rules")
struct TUFDelegationRuleTests {
    static let pairs: [(String, String)] = [
        ("mall/*", "mall/manifest.json"), ("mall/*", "mall/sub/x.zip"), ("mall/*", "mall2/manifest.json"), ("mall/*", "mall/"),
        ("*", "mall/manifest.json"), ("*/*", "mall/manifest.json"), ("mall/*.gz", "mall/1.0.0.zip.gz"), ("mall/*.gz", "mall/1.0.0.zip"),
        ("mall/?.zip", "mall/1.zip"), ("mall/?.zip", "mall/12.zip"), ("mall/[0-9]*", "mall/1.zip"), ("mall/[!0-9]*", "mall/1.zip"),
        ("mall/[!0-9]*", "mall/manifest.json"), ("mall/[]]x", "mall/]x"), ("mall/[x", "mall/[x"), ("mall/[x", "mall/x"),
        ("mall/a*b*c", "mall/aXbYc"), ("mall/a*b*c", "mall/aXbY"), ("mall/**", "mall/x"), ("mall/*", "MALL/x"),
        ("mall/é*", "mall/éa"), ("", ""), ("mall//x", "mall//x"), ("mall/*", "mall/*"), ("mall/\\*", "mall/\\x"),
        (String(repeating: "*a", count: 40), String(repeating: "a", count: 200) + "b"),
        // Python splits on the scalar `/`, also inside a grapheme cluster.
        ("*", "mall\u{600}/manifest.json"), ("*/*", "mall\u{600}/manifest.json"), ("mall/*", "mall/\u{301}x"), ("*", "mall/\u{301}x"),
    ]

    @Test("a role's paths match a target exactly as python-tuf's is_delegated_path decides (fnmatch per path part)")
    func pathsMatchLikePythonTUF() async throws {
        let ours = Self.pairs.map { pattern, target in
            TUFDelegatedRole(name: "r", role: TUFRole(keyIDs: [], threshold: 1), terminating: false, paths: [pattern]).matches(target)
        }
        #expect(ours.prefix(4) == [true, false, false, true])
        guard PythonTUF.missing == nil else { Issue.record(Comment(rawValue: "skipped: \(PythonTUF.missing ?? "")")); return }
        let out = try await PythonTUF.run("pathmatch.py", Self.pairs.flatMap { [$0.0, $0.1] })
        let theirs = try #require(try JSONSerialization.jsonObject(with: Data(out.utf8)) as? [Bool])
        for (index, pair) in Self.pairs.enumerated() where ours[index] != theirs[index] {
            Issue.record("\(pair): ours \(ours[index]), python-tuf \(theirs[index])")
        }
    }

    @Test("path_hash_prefixes match by the SHA-256 of the path")
    func hashPrefixes() throws {
        let hash = SHA256.hash(data: Data("mall/manifest.json".utf8)).hex
        let role = try TUFDelegatedRole(TUFFields(StrictJSON.parse(Data("""
            {"name": "bin", "keyids": [], "threshold": 1, "terminating": false, "path_hash_prefixes": ["\(hash.prefix(8))"]}
            """.utf8)), context: "role"))
        #expect(role.matches("mall/manifest.json"))
        #expect(!role.matches("mall/manifest.jso"))
    }

    @Test("delegations refuse a repeated role name, a top-level role name, both or neither of paths and path_hash_prefixes (metadata-invalid)")
    func malformedDelegations() throws {
        let role = #"{"name": "a", "keyids": [], "threshold": 1, "terminating": false, "paths": ["a/*"]}"#
        for roles in [
            "[\(role), \(role)]",
            #"[{"name": "targets", "keyids": [], "threshold": 1, "terminating": false, "paths": ["a/*"]}]"#,
            #"[{"name": "a", "keyids": [], "threshold": 1, "terminating": false, "paths": [], "path_hash_prefixes": []}]"#,
            #"[{"name": "a", "keyids": [], "threshold": 1, "terminating": false}]"#,
            #"[{"name": "a", "keyids": [], "threshold": 1, "paths": ["a/*"]}]"#,
            #"{}"#,
        ] {
            let json = try StrictJSON.parse(Data(#"{"keys": {}, "roles": \#(roles)}"#.utf8))
            #expect(throws: OfflineAgentError.self, "\(roles)") { try TUFDelegations(TUFFields(json, context: "delegations")) }
            do {
                _ = try TUFDelegations(TUFFields(json, context: "delegations"))
            } catch let error as OfflineAgentError {
                #expect(error.cause == .metadataInvalid, "\(roles): \(error)")
            }
        }
    }

    /// A trusted set with a snapshot naming `app.json` v`listed`, top-level targets
    /// delegating `app/*` to `appKey`; one key signs every top-level role.
    static func trustedSet(appKey: SigningKey, listed: Int64) throws -> TUFTrustedSet {
        let key = SigningKey.generate()
        let expires = Date().addingTimeInterval(86_400)
        func file(_ signed: [String: StrictJSON]) throws -> Data { try TUFSigner.file(signed, keys: [key]) }
        var set = try TUFTrustedSet(root: file(TUFRepository.newRoot(keys: TUFKeys(all: key), expires: expires)), now: Date())
        var timestamp = TUFSigner.common(type: "timestamp", version: 1, expires: expires)
        timestamp["meta"] = .object(["snapshot.json": TUFMetaFile(version: 1).json])
        try set.updateTimestamp(file(timestamp))
        var snapshot = TUFSigner.common(type: "snapshot", version: 1, expires: expires)
        snapshot["meta"] = .object(["targets.json": TUFMetaFile(version: 1).json, "app.json": TUFMetaFile(version: listed).json])
        try set.updateSnapshot(file(snapshot))
        let trusted = TUFSigner.key(appKey)
        var targets = TUFSigner.common(type: "targets", version: 1, expires: expires)
        targets["targets"] = .object([:])
        targets["delegations"] = TUFDelegations(keys: [trusted.keyID: trusted], roles: [
            TUFDelegatedRole(name: "app", role: TUFRole(keyIDs: [trusted.keyID], threshold: 1), terminating: true, paths: ["app/*"]),
        ]).json
        try set.updateTargets(file(targets))
        return set
    }

    @Test("a delegated role's metadata: signed by the delegator's key for it, the version snapshot names, unexpired, named by snapshot; else its cause")
    func delegatedMetadataChecks() throws {
        let appKey = SigningKey.generate(), other = SigningKey.generate()
        func delegated(version: Int64, expires: Date = Date().addingTimeInterval(86_400), by key: SigningKey? = nil) throws -> Data {
            var signed = TUFSigner.common(type: "targets", version: version, expires: expires)
            signed["targets"] = .object([:])
            return try TUFSigner.file(signed, keys: [key ?? appKey])
        }
        var set = try Self.trustedSet(appKey: appKey, listed: 2)
        try set.updateDelegatedTargets(delegated(version: 2), role: "app", delegator: "targets")
        #expect(set.targets(of: "app")?.metadata.version == 2)
        let cases: [(String, () throws -> Void, OfflineAgentError.Cause)] = [
            ("another key", { try set.updateDelegatedTargets(delegated(version: 2, by: other), role: "app", delegator: "targets") }, .thresholdNotMet),
            ("another version", { try set.updateDelegatedTargets(delegated(version: 1), role: "app", delegator: "targets") }, .metadataMismatch),
            ("expired", { try set.updateDelegatedTargets(delegated(version: 2, expires: Date().addingTimeInterval(-1)), role: "app", delegator: "targets") }, .metadataExpired),
            ("not in snapshot", { try set.updateDelegatedTargets(delegated(version: 2), role: "shop", delegator: "targets") }, .metadataMismatch),
        ]
        for (name, body, cause) in cases {
            do {
                try body()
                Issue.record("\(name): accepted")
            } catch let error as OfflineAgentError {
                #expect(error.cause == cause, "\(name): \(error)")
            }
        }
    }

    @Test("a rollout file narrows only the manifest it names, never widens, and fixes a schedule at the lower stage; a malformed one is manifest-invalid")
    func rolloutNarrowsOnly() throws {
        let zero = String(repeating: "0", count: 64)
        var manifest = Manifest(
            app: "mall", version: Version("2.0.0")!, miniVersion: Version("1.0.0")!, isPatch: false, url: "2.0.0.zip", size: 1, sha256: zero,
            packageSha256: zero, whitelist: ["https://h5.example.com/mall/"])
        manifest.stage = 40
        let bytes: [UInt8] = Array("manifest".utf8), hash = SHA256.hash(data: bytes).hex
        let now = Date()
        #expect(TUFRollout(app: "mall", manifest: hash, role: "targets", version: 3, stage: 0).narrow(manifest, app: "mall", manifestBytes: bytes, listedBy: ("targets", 3), now: now).stage == 0)
        #expect(TUFRollout(app: "mall", manifest: hash, role: "targets", version: 3, stage: 100).narrow(manifest, app: "mall", manifestBytes: bytes, listedBy: ("targets", 3), now: now).stage == 40)
        #expect(TUFRollout(app: "mall", manifest: hash, role: "targets", version: 3, stage: 0).narrow(manifest, app: "mall", manifestBytes: bytes + [1], listedBy: ("targets", 3), now: now).stage == 40)
        #expect(TUFRollout(app: "mall", manifest: hash, role: "targets", version: 3, stage: 0).narrow(manifest, app: "mall", manifestBytes: bytes, listedBy: ("targets", 4), now: now).stage == 40)
        #expect(TUFRollout(app: "mall", manifest: hash, role: "targets", version: 3, stage: 0).narrow(manifest, app: "mall", manifestBytes: bytes, listedBy: ("mall", 3), now: now).stage == 40)
        #expect(TUFRollout(app: "shop", manifest: hash, role: "targets", version: 3, stage: 0).narrow(manifest, app: "mall", manifestBytes: bytes, listedBy: ("targets", 3), now: now).stage == 40)
        manifest.stage = nil
        manifest.publishedAt = now.addingTimeInterval(-7200)
        manifest.stageSchedule = [ManifestStageStep(afterSeconds: 0, percent: 10), ManifestStageStep(afterSeconds: 3600, percent: 100)]
        let fixed = TUFRollout(app: "mall", manifest: hash, role: "targets", version: 3, stage: 30).narrow(manifest, app: "mall", manifestBytes: bytes, listedBy: ("targets", 3), now: now)
        #expect(fixed.stage == 30 && fixed.stageSchedule.isEmpty)
        #expect(try TUFRollout(Array(#"{"app": "mall", "manifest": "\#(hash)", "role": "mall", "version": 2, "stage": 0, "reason": "x"}"#.utf8)).stage == 0)
        for text in [#"{"app": "mall", "manifest": "ab", "stage": 0}"#, #"{"app": "mall", "manifest": "\#(hash)", "role": "mall", "version": 2, "stage": 101}"#,
                     #"{"app": "mall", "manifest": "\#(hash)", "role": "mall", "version": 0, "stage": 0}"#, "[]",
                     #"{"app": "mall", "manifest": "\#(hash)", "role": "mall", "version": 2, "stage": 1.5}"#] {
            #expect(throws: OfflineAgentError.self, "\(text)") { try TUFRollout(Array(text.utf8)) }
        }
    }
}
