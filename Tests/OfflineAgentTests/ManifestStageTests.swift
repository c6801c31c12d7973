import Crypto
import Foundation
import Testing
@testable import OfflineAgent
import TestSupport

/// Format 2 of the manifest (issue 31): the staged rollout a device obeys, and the
/// envelope that carries a manifest's own signature.
@Suite("Manifest stage and envelope")
struct ManifestStageTests {
    static func body(_ object: [String: Any]) throws -> Data {
        try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
    }

    static func minimal(_ extra: [String: Any] = [:]) -> [String: Any] {
        var object: [String: Any] = [
            "app": "mall", "version": "1.1.0", "miniVersion": "1.0.0", "isPatch": false, "url": "1.1.0.zip", "size": 1,
            "sha256": String(repeating: "a", count: 64), "packageSha256": String(repeating: "a", count: 64), "whitelist": [String](),
        ]
        object.merge(extra) { $1 }
        return object
    }

    static func expectInvalid(_ extra: [String: Any], _ text: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let body = try body(minimal(extra))
        do {
            _ = try Manifest.decode(body)
            Issue.record("accepted \(extra)", sourceLocation: sourceLocation)
        } catch let error as OfflineAgentError {
            #expect(error.cause == .manifestInvalid, sourceLocation: sourceLocation)
            #expect(error.reason.contains(text), "\(error.reason)", sourceLocation: sourceLocation)
        }
    }

    @Test("hostile stage, schedule and format fields are refused with their rule")
    func hostileFields() throws {
        let time = "2026-11-27T00:00:00Z"
        try Self.expectInvalid(["stage": 101], "stage must be an integer 0…100")
        try Self.expectInvalid(["stage": -1], "stage must be an integer 0…100")
        try Self.expectInvalid(["stage": "10"], "stage must be an integer 0…100")
        try Self.expectInvalid(["stage": 5.5], "stage must be an integer 0…100")
        try Self.expectInvalid(["format": 3], "format must be an integer 1…2")
        try Self.expectInvalid(["format": 0], "format must be an integer 1…2")
        try Self.expectInvalid(["publishedAt": "yesterday"], "publishedAt must be an RFC 3339 time")
        try Self.expectInvalid(["stageSchedule": [[String: Any]](), "publishedAt": time], "stageSchedule must be an array")
        try Self.expectInvalid(["stageSchedule": [["afterSeconds": 0, "percent": 5]]], "stageSchedule needs publishedAt")
        try Self.expectInvalid(["stageSchedule": [["afterSeconds": 0, "percent": 5]], "publishedAt": time, "stage": 5], "cannot both be given")
        try Self.expectInvalid(
            ["stageSchedule": [["afterSeconds": 0, "percent": 50], ["afterSeconds": 60, "percent": 10]], "publishedAt": time],
            "stageSchedule[1]: percent must not be below")
        try Self.expectInvalid(
            ["stageSchedule": [["afterSeconds": 60, "percent": 5], ["afterSeconds": 60, "percent": 10]], "publishedAt": time],
            "stageSchedule[1]: afterSeconds must be above")
        try Self.expectInvalid(["stageSchedule": [["afterSeconds": 1e20, "percent": 5]], "publishedAt": time], "stageSchedule[0]: afterSeconds")
        try Self.expectInvalid(["stageSchedule": [["afterSeconds": 0, "percent": 101]], "publishedAt": time], "stageSchedule[0]: percent")
        let many = (0...16).map { ["afterSeconds": $0, "percent": 100] }
        try Self.expectInvalid(["stageSchedule": many, "publishedAt": time], "stageSchedule must be an array of 1 to 16")
    }

    @Test("the stage in force follows the device clock: before publishedAt nobody, then each step; a wrong clock only moves entry")
    func currentStage() throws {
        let published = Date(timeIntervalSince1970: 1_800_000_000)
        var manifest = try Manifest.decode(try Self.body(Self.minimal()))
        #expect(manifest.currentStage(at: published) == 100, "no stage: everyone")
        manifest.publishedAt = published
        manifest.stageSchedule = [ManifestStageStep(afterSeconds: 0, percent: 10), ManifestStageStep(afterSeconds: 3600, percent: 60)]
        #expect(manifest.currentStage(at: published.addingTimeInterval(-1)) == 0)
        #expect(manifest.admits(bucket: 10, at: published) && !manifest.admits(bucket: 11, at: published))
        #expect(manifest.admits(bucket: 60, at: published.addingTimeInterval(3600)))
        // A clock years off changes the stage only: the manifest's other rules do not use it here.
        #expect(manifest.currentStage(at: Date.distantFuture) == 60 && manifest.currentStage(at: Date.distantPast) == 0)
    }

    @Test("a malformed envelope is refused whole; a nested one too")
    func malformedEnvelope() throws {
        let inner = try Self.body(Self.minimal())
        for (envelope, text) in [
            ("\"x\"" as Any, "envelope must be an object"),
            (["manifest": "%%%"], "envelope.manifest must be"),
            (["manifest": inner.base64EncodedString(), "signature": 5], "envelope.signature must be"),
            (["manifest": (try Self.body(Self.minimal(["envelope": ["manifest": ""]]))).base64EncodedString()], "holds another envelope"),
        ] as [(Any, String)] {
            let body = try Self.body(Self.minimal(["envelope": envelope]))
            #expect(throws: OfflineAgentError.self) { try ManifestEnvelope.open(body) }
            do { _ = try ManifestEnvelope.open(body) } catch let error as OfflineAgentError {
                #expect(error.cause == .manifestInvalid && error.reason.contains(text), "\(error.reason)")
            }
        }
        #expect(try ManifestEnvelope.open(inner) == nil, "a format 1 body has no envelope")
    }

    /// Serves `outer` fields with an envelope around `inner` signed by `signer` (nil: no signature).
    static func serveEnvelope(_ h: SyncHarness, inner: [String: Any], signer: Curve25519.Signing.PrivateKey?, headers: [(String, String)] = []) throws {
        let innerBody = try body(inner)
        var envelope: [String: Any] = ["manifest": innerBody.base64EncodedString()]
        if let signer { envelope["signature"] = try signer.signature(for: innerBody).base64EncodedString() }
        var outer = inner
        outer["envelope"] = envelope
        h.origin.setManifest(raw: [UInt8](try body(outer)), headers: headers)
    }

    @Test("the agent verifies the envelope's own signature and ignores a header beside it")
    func envelopeVerified() async throws {
        let key = Curve25519.Signing.PrivateKey(), other = Curve25519.Signing.PrivateKey()
        let publicKey = key.publicKey.rawRepresentation.base64EncodedString()

        // Signed inside; a wrong header is not consulted.
        let h = try SyncHarness()
        try Self.serveEnvelope(h, inner: h.full("1.0.0"), signer: key, headers: [("X-Offline-Signature", "AAAA")])
        #expect(await h.sync(publicKey: publicKey).result == .updated)
        #expect(h.origin.requests(for: "/manifest.sig").isEmpty)

        // Signed by another key: refused, whatever a header says.
        let bad = try SyncHarness()
        let inner = bad.full("1.0.0")
        let outerBody = try Self.body(inner)
        try Self.serveEnvelope(bad, inner: inner, signer: other, headers: [("X-Offline-Signature", try key.signature(for: outerBody).base64EncodedString())])
        #expect(await bad.sync(publicKey: publicKey).error?.cause == .signatureInvalid)

        // No signature in the envelope: missing.
        let unsigned = try SyncHarness()
        try Self.serveEnvelope(unsigned, inner: unsigned.full("1.0.0"), signer: nil)
        #expect(await unsigned.sync(publicKey: publicKey).error?.cause == .signatureMissing)

        // The outer fields are for format 1 agents only: the signed inner bytes decide.
        let split = try SyncHarness()
        var lying = split.full("1.0.0")
        try Self.serveEnvelope(split, inner: split.full("1.0.0", ["stage": 0]), signer: key)
        lying["stage"] = 100
        #expect(await split.sync(publicKey: publicKey).result == .notInStage)
    }

    @Test("a device outside the stage downloads nothing and reports not-in-stage; inside, it installs")
    func deviceObeysStage() async throws {
        let h = try SyncHarness()
        let bucket = Resolver.rolloutBucket(deviceID: try DeviceID.load(root: h.root.path), app: "mall")
        h.origin.setManifest(h.full("1.0.0", ["stage": bucket - 1]))
        let outside = await h.sync()
        #expect(outside.result == .notInStage && outside.bytesDownloaded == 0)
        #expect(outside.stage?.bucket == bucket && outside.stage?.percent == bucket - 1)
        #expect(h.origin.requests(for: "/files/1.0.0.zip").isEmpty)
        h.origin.setManifest(h.full("1.0.0", ["stage": bucket]))
        #expect(await h.sync().result == .updated)
        // Already on the version: a shrunk stage changes nothing.
        h.origin.setManifest(h.full("1.0.0", ["stage": 0]))
        #expect(await h.sync().result == .upToDate)
        // A host app's own device id places the device instead of the root's.
        h.origin.setManifest(h.full("1.1.0", ["stage": 10]))
        let ids = (0..<1000).map { "host-\($0)" }
        let inside = try #require(ids.first { Resolver.rolloutBucket(deviceID: $0, app: "mall") <= 10 })
        let outsideID = try #require(ids.first { Resolver.rolloutBucket(deviceID: $0, app: "mall") > 10 })
        var options = SyncOptions(force: true)
        options.deviceID = outsideID
        #expect(await h.agent().sync(app: "mall", manifest: h.origin.manifestURL, options: options).result == .notInStage)
        options.deviceID = inside
        #expect(await h.agent().sync(app: "mall", manifest: h.origin.manifestURL, options: options).result == .updated)
    }
}
