import Crypto
import Foundation
@testable import OfflineAgent
import OfflinePublish
import TestSupport
import Testing

/// The TUF core as python-tuf reads it: canonical JSON, keys, signatures over the parsed
/// `signed` object, thresholds over distinct keys, and the trusted set's rules, each
/// refusal with its cause.
@Suite struct TUFCoreTests {
    /// Input JSON → the canonical bytes securesystemslib's `encode_canonical` gives
    /// (nil: it refuses). Written from its rules, then checked against python itself below.
    static let canonical: [(String, String?)] = [
        (#"{"b": 1, "a": [true, false, null]}"#, #"{"a":[true,false,null],"b":1}"#),
        // Only \ and " are escaped; a newline, a tab, a slash, NUL and U+2028 are written raw.
        (#"{"s": "q\"b\\n\nt\t/\u0000\u2028"}"#, "{\"s\":\"q\\\"b\\\\n\nt\t/\u{0}\u{2028}\"}"),
        // Code point order, not Swift's: U+00C6 (Æ) before U+212B (Å sign), which Swift
        // normalises to U+00C5 and would put first; and U+FB01 before U+1F600.
        (#"{"\u212b": 1, "\u00c6": 2, "\ud83d\ude00": 3, "\ufb01": 4, "Z": 5, "a": 6}"#, "{\"Z\":5,\"a\":6,\"\u{C6}\":2,\"\u{212B}\":1,\"\u{FB01}\":4,\"\u{1F600}\":3}"),
        // Keys and strings are kept as written, never normalised: a decomposed é stays decomposed.
        (#"{"e\u0301": "e\u0301", "x": 2}"#, "{\"e\u{301}\":\"e\u{301}\",\"x\":2}"),
        (#"[-0, 0, -12, 123456789012345678901234567890]"#, "[0,0,-12,123456789012345678901234567890]"),
        (#"{"a": {}, "b": [], "c": ""}"#, #"{"a":{},"b":[],"c":""}"#),
        (#"{"f": 1.0}"#, nil),
        (#"{"f": 1e3}"#, nil),
        (#"[0.5]"#, nil),
    ]

    /// Two keys that differ only by normalisation (é precomposed and decomposed) are
    /// refused by the strict reader every signed body goes through: python-tuf would
    /// take them as two keys, a Swift dictionary as one, so the object would not mean
    /// one thing to every reader. A refusal (`metadata-invalid`), never a wrong signature.
    @Test func canonicallyEquivalentKeysAreRefused() throws {
        #expect(throws: StrictJSON.Failure.self) { try StrictJSON.parse(Array(#"{"e\u0301": 1, "\u00e9": 2}"#.utf8)) }
        let fixture = TUFFixture()
        var text = String(decoding: try fixture.rootFile(), as: UTF8.self)
        text = text.replacingOccurrences(of: #""_type""#, with: #""e\u0301": 1, "\u00e9": 2, "_type""#)
        let error = #expect(throws: OfflineAgentError.self) { try TUFRoot(Data(text.utf8)) }
        #expect(error?.cause == .metadataInvalid)
    }

    @Test func canonicalTable() throws {
        for (input, expected) in Self.canonical {
            let value = try StrictJSON.parse(Array(input.utf8))
            if let expected {
                #expect(String(decoding: try CanonicalJSON.encode(value), as: UTF8.self) == expected, "\(input)")
            } else {
                #expect(throws: CanonicalJSON.Failure.self, "\(input)") { try CanonicalJSON.encode(value) }
            }
        }
    }

    @Test(.enabled(if: PythonTUF.missing == nil, "\(PythonTUF.missing ?? "")"))
    func canonicalMatchesSecuresystemslib() async throws {
        let input = TemporaryDirectory()
        let lines = Self.canonical.map(\.0).joined(separator: "\n") + "\n"
        try Data(lines.utf8).write(to: URL(fileURLWithPath: input.path + "/in.jsonl"))
        let result = try await run("/bin/sh", ["-c", "'\(PythonTUF.python)' '\(Repo.fixtures)/tuf/canonical.py' < '\(input.path)/in.jsonl'"])
        let python = result.stdout.split(separator: "\n").map(String.init)
        #expect(python.count == Self.canonical.count, "\(result.stderr)")
        for ((input, _), theirs) in zip(Self.canonical, python) {
            let ours = (try? CanonicalJSON.encode(StrictJSON.parse(Array(input.utf8)))).map { Data($0).hex } ?? "ERR"
            #expect(ours == theirs, "\(input)")
        }
    }

    /// A repository python-tuf's `tuf.api.metadata` wrote (indented, unknown fields and
    /// non-ASCII keys in every signed object, a timestamp key rotation) loads whole.
    @Test(.enabled(if: PythonTUF.missing == nil, "\(PythonTUF.missing ?? "")"))
    func pythonRepositoryVerifies() async throws {
        let dir = TemporaryDirectory()
        try Data("hello\n".utf8).write(to: URL(fileURLWithPath: dir.path + "/hello"))
        try await PythonTUF.run("repository.py", [dir.path + "/repo", "ünï/é.txt=\(dir.path)/hello"])
        func file(_ name: String) throws -> Data { try Data(contentsOf: URL(fileURLWithPath: "\(dir.path)/repo/metadata/\(name)")) }
        var set = try TUFTrustedSet(root: file("1.root.json"), now: Date())
        #expect(try set.updateRoot(file("2.root.json")))
        #expect(try set.updateTimestamp(file("timestamp.json")))
        try set.updateSnapshot(file("1.snapshot.json"))
        try set.updateTargets(file("1.targets.json"))
        #expect(set.targets?.targets["ünï/é.txt"] == TUFTargetFile(length: 6, sha256: SHA256.hash(data: Data("hello\n".utf8)).hex))

        // The timestamp v1 root's key signed it; the rotated root no longer trusts it.
        var stale = try TUFTrustedSet(root: file("1.root.json"), now: Date())
        let error = #expect(throws: OfflineAgentError.self) { try stale.updateTimestamp(file("timestamp.json")) }
        #expect(error?.cause == .thresholdNotMet)
    }

    @Test func keyIDsAreOpaqueAndThresholdsCountDistinctKeys() throws {
        var fixture = TUFFixture()
        fixture.thresholds["timestamp"] = 2
        let key = TUFSigner.key(fixture.timestamp[0])
        // Root names one timestamp key under two ids; signing under both is one signer.
        var signed = TUFSigner.common(type: "root", version: 1, expires: fixture.later)
        var keys: [String: StrictJSON] = ["first": key.json, "second": key.json]
        var roles: [String: StrictJSON] = ["timestamp": TUFRole(keyIDs: ["first", "second"], threshold: 2).json]
        for role in ["root", "snapshot", "targets"] {
            let listed = TUFSigner.key(fixture.keys(role)[0])
            keys[listed.keyID] = listed.json
            roles[role] = TUFRole(keyIDs: [listed.keyID], threshold: 1).json
        }
        signed["keys"] = .object(keys)
        signed["roles"] = .object(roles)
        let root = try TUFSigner.file(signed, keys: fixture.root)
        var set = try TUFTrustedSet(root: root, now: Date())

        let timestamp = try StrictJSON.parse(fixture.timestampFile(version: 1, snapshot: 1))
        guard case .object(var file) = timestamp, case .array(let signatures) = file["signatures"],
              case .object(let only) = signatures[0], case .string(let sig) = only["sig"] else { Issue.record("no signature"); return }
        file["signatures"] = .array([.object(["keyid": .string("first"), "sig": .string(sig)]), .object(["keyid": .string("second"), "sig": .string(sig)])])
        let error = #expect(throws: OfflineAgentError.self) { try set.updateTimestamp(StrictJSON.object(file).written()) }
        #expect(error?.cause == .thresholdNotMet)
    }

    @Test func refusalsHaveTheirCauses() throws {
        let fixture = TUFFixture()
        let now = Date()
        func cause(_ body: () throws -> Void) -> OfflineAgentError.Cause? {
            do { try body() } catch let error as OfflineAgentError { return error.cause } catch { return nil }
            return nil
        }
        let root1 = try fixture.rootFile()
        // Root chain: N+2, unsigned by the old root, unsigned by itself.
        var other = fixture
        other.root = [SigningKey.generate()]
        var set = try TUFTrustedSet(root: root1, now: now)
        #expect(cause { try set.updateRoot(fixture.rootFile(version: 3)) } == .rootChainBroken)
        #expect(cause { try set.updateRoot(other.rootFile(version: 2)) } == .rootChainBroken)
        #expect(cause { try set.updateRoot(other.rootFile(version: 2, signers: fixture.root)) } == .rootChainBroken)
        #expect(cause { try set.updateRoot(fixture.rootFile(version: 1)) } == .rootChainBroken)
        try set.updateRoot(other.rootFile(version: 2, signers: fixture.root + other.root))
        #expect(set.root.metadata.version == 2)

        // Timestamp: replay, equal, expired, under threshold.
        set = try TUFTrustedSet(root: root1, now: now)
        #expect(try set.updateTimestamp(fixture.timestampFile(version: 5, snapshot: 5)))
        #expect(cause { try set.updateTimestamp(fixture.timestampFile(version: 4, snapshot: 5)) } == .metadataReplay)
        #expect(cause { try set.updateTimestamp(fixture.timestampFile(version: 6, snapshot: 4)) } == .metadataReplay)
        #expect(try set.updateTimestamp(fixture.timestampFile(version: 5, snapshot: 5)) == false)
        #expect(cause { try set.updateTimestamp(fixture.timestampFile(version: 7, snapshot: 5, expires: now.addingTimeInterval(-1))) } == .metadataExpired)
        var fresh = try TUFTrustedSet(root: root1, now: now)
        #expect(cause { try fresh.updateTimestamp(fixture.timestampFile(version: 1, snapshot: 1, signers: fixture.snapshot)) } == .thresholdNotMet)

        // Snapshot: the one timestamp names, its length and hashes when given.
        let snapshot = try fixture.snapshotFile(version: 3, targets: 3)
        fresh = try TUFTrustedSet(root: root1, now: now)
        try fresh.updateTimestamp(fixture.timestampFile(version: 1, snapshot: 3, snapshotFile: snapshot))
        #expect(cause { try fresh.updateSnapshot(snapshot + Data(" ".utf8)) } == .lengthExceeded)
        var padded = snapshot
        padded[padded.count - 1] = UInt8(ascii: " ")
        #expect(cause { try fresh.updateSnapshot(padded) } == .hashMismatch)
        try fresh.updateSnapshot(snapshot)
        #expect(cause { try fresh.updateTargets(fixture.targetsFile(version: 2)) } == .metadataMismatch)
        #expect(cause { try fresh.updateTargets(fixture.targetsFile(version: 3, signers: fixture.snapshot)) } == .thresholdNotMet)
        #expect(cause { try fresh.updateTargets(fixture.targetsFile(version: 3, expires: now.addingTimeInterval(-60))) } == .metadataExpired)
        try fresh.updateTargets(fixture.targetsFile(version: 3))

        var mixed = try TUFTrustedSet(root: root1, now: now)
        try mixed.updateTimestamp(fixture.timestampFile(version: 1, snapshot: 4))
        #expect(cause { try mixed.updateSnapshot(fixture.snapshotFile(version: 3, targets: 3)) } == .metadataMismatch)

        // Final root expired: nothing more is read.
        var old = try TUFTrustedSet(root: fixture.rootFile(expires: now.addingTimeInterval(-1)), now: now)
        #expect(cause { try old.updateTimestamp(fixture.timestampFile(version: 1, snapshot: 1)) } == .metadataExpired)
    }

    @Test func malformedMetadataIsInvalid() throws {
        let fixture = TUFFixture()
        func root(_ change: (inout [String: StrictJSON]) -> Void) throws -> Data {
            guard case .object(var file) = try StrictJSON.parse(fixture.rootFile()), case .object(var signed) = file["signed"] else { return Data() }
            change(&signed)
            file["signed"] = .object(signed)
            // Re-signed, so only the field is wrong.
            return try TUFSigner.file(signed, keys: fixture.root)
        }
        let cases: [(String, (inout [String: StrictJSON]) -> Void)] = [
            ("spec 2", { $0["spec_version"] = .string("2.0.0") }),
            ("spec x", { $0["spec_version"] = .string("1.x") }),
            ("version 0", { $0["version"] = .number("0") }),
            ("version huge", { $0["version"] = .number("99999999999999999999") }),
            ("fraction", { $0["expires"] = .string("2030-01-01T00:00:00.5Z") }),
            ("offset", { $0["expires"] = .string("2030-01-01T00:00:00+00:00") }),
            ("type", { $0["_type"] = .string("targets") }),
            ("roles", { $0["roles"] = .object([:]) }),
        ]
        for (name, change) in cases {
            let error = #expect(throws: OfflineAgentError.self, "\(name)") { try TUFTrustedSet(root: root(change), now: Date()) }
            #expect(error?.cause == .metadataInvalid, "\(name)")
        }
        // A float anywhere in signed: no canonical form, so nothing to verify.
        var file = String(decoding: try fixture.rootFile(), as: UTF8.self)
        file = file.replacingOccurrences(of: "\"version\": 1", with: "\"version\": 1, \"x\": 1.5")
        let error = #expect(throws: OfflineAgentError.self) { try TUFTrustedSet(root: Data(file.utf8), now: Date()) }
        #expect(error?.cause == .metadataInvalid)
    }
}
