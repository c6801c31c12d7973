import Crypto
import Foundation
import Testing
@testable import OfflineAgent
@testable import OfflinePublish
import TestSupport

/// The TUF repository a keyed publish directory is: its files, the versions each verb
/// bumps, and the keys it refuses.
@Suite("TUF repository")
struct TUFRepositoryTests {
    typealias F = PublishFixtures

    static func chain(_ out: String) throws -> (timestamp: TUFTimestamp, snapshot: TUFSnapshot, targets: TUFTargets) {
        let directory = "\(out)/metadata"
        let (timestamp, snapshot, targets) = TUFRepository.currentChain(in: directory)
        return (try #require(timestamp), try #require(snapshot), try #require(targets))
    }

    @Test("publish writes 1.root.json, targets with every file by length and SHA-256 under hash-prefixed names too, snapshot and timestamp")
    func layout() throws {
        let (out, key) = try ReleaseVerbTests.published()
        let key1 = try #require(key)
        let root = try TUFRoot(Data(contentsOf: URL(fileURLWithPath: "\(out)/metadata/1.root.json")))
        #expect(root.consistentSnapshot)
        for role in ["root", "targets", "snapshot", "timestamp"] {
            #expect(root.signers(of: role).keys == [Array(TUFSigner.key(key1).publicKey.rawRepresentation)])
        }
        // The trusted set a device builds accepts the chain as written.
        // At the publish time the fixture signs at: its timestamp lasts a week from then.
        var set = try TUFTrustedSet(root: Data(contentsOf: URL(fileURLWithPath: "\(out)/metadata/1.root.json")), now: F.fixedPublishTime)
        let (timestamp, snapshot, targets) = try Self.chain(out)
        #expect(try set.updateTimestamp(Data(contentsOf: URL(fileURLWithPath: "\(out)/metadata/timestamp.json"))))
        try set.updateSnapshot(Data(contentsOf: URL(fileURLWithPath: "\(out)/metadata/\(timestamp.snapshot.version).snapshot.json")))
        try set.updateTargets(Data(contentsOf: URL(fileURLWithPath: "\(out)/metadata/\(snapshot.meta["targets.json"]!.version).targets.json")))
        #expect(Set(targets.targets.keys) == [
            "sample/manifest.json", "sample/1.0.0.zip", "sample/1.0.0.zip.gz", "sample/1.1.0.zip", "sample/1.1.0.zip.gz", "sample/1.0.0-1.1.0.bsdiff",
        ])
        for (path, target) in targets.targets {
            let bytes = try Data(contentsOf: URL(fileURLWithPath: "\(out)/\(path)"))
            #expect(Int64(bytes.count) == target.length && SHA256.hash(data: bytes).hex == target.sha256, "\(path)")
            let name = (path as NSString).lastPathComponent, dir = (path as NSString).deletingLastPathComponent
            #expect(try Data(contentsOf: URL(fileURLWithPath: "\(out)/\(dir)/\(target.sha256!).\(name)")) == bytes, "\(path)")
        }
    }

    @Test("every verb that changes the live release bumps targets, snapshot and timestamp; nothing changed bumps nothing")
    func versionsBump() throws {
        let (out, key) = try ReleaseVerbTests.published()
        let keys = TUFKeys(all: try #require(key))
        var last = try TUFRepository.refresh(publishDirectory: out, keys: keys, now: Date())
        #expect(try TUFRepository.refresh(publishDirectory: out, keys: keys, now: Date()) == last)
        let verbs: [(String, () throws -> Void)] = [
            ("stage", { try ReleaseEditor.stage(app: "sample", publishDirectory: out, percent: 0, key: key) }),
            ("set", { try ReleaseEditor.set(app: "sample", publishDirectory: out, settings: ReleaseSettings(rollout: 50), key: key) }),
            ("revert", { try ReleaseEditor.revert(app: "sample", publishDirectory: out, to: Version("1.0.0")!, key: key) }),
        ]
        for (verb, body) in verbs {
            try body()
            let now = try TUFRepository.refresh(publishDirectory: out, keys: keys, now: Date())
            #expect(now.targets > last.targets && now.snapshot > last.snapshot && now.timestamp > last.timestamp, "\(verb): \(last) -> \(now)")
            #expect(now.root == 1, "\(verb)")
            last = now
        }
    }

    @Test("publish and the verbs refuse a key the root does not name, naming both fingerprints, before writing anything")
    func wrongKeyRefused() throws {
        let (out, key) = try ReleaseVerbTests.published()
        let other = SigningKey.generate()
        let expected = TUFSigner.key(try #require(key)).fingerprint, given = TUFSigner.key(other).fingerprint
        for body in [
            { _ = try Publisher.publish(PublishOptions(app: "sample", version: Version("1.2.0")!, sourceDirectory: F.sampleApp("1.2.0"), publishDirectory: out, signingKey: other)) },
            { try ReleaseEditor.stage(app: "sample", publishDirectory: out, percent: 10, key: other) },
        ] as [() throws -> Void] {
            ReleaseVerbTests.expectRefused(out, given) { try body() }
            ReleaseVerbTests.expectRefused(out, expected) { try body() }
        }
    }

    @Test("timestamp re-signs freshness only: timestamp + 1, the same snapshot; another key is refused")
    func timestampOnly() throws {
        let (out, key) = try ReleaseVerbTests.published()
        let before = try Self.chain(out)
        let until = Date().addingTimeInterval(86_400)
        let version = try TUFRepository.refreshTimestamp(publishDirectory: out, key: try #require(key), expires: until)
        let after = try Self.chain(out)
        #expect(version == before.timestamp.metadata.version + 1 && after.timestamp.metadata.version == version)
        #expect(after.timestamp.snapshot == before.timestamp.snapshot)
        #expect(after.snapshot.metadata.version == before.snapshot.metadata.version)
        #expect(TUFMetadata.string(after.timestamp.metadata.expires) == TUFMetadata.string(until))
        ReleaseVerbTests.expectRefused(out, "names for timestamp") {
            try TUFRepository.refreshTimestamp(publishDirectory: out, key: SigningKey.generate(), expires: until)
        }
    }
}
