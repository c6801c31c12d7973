import Foundation
import Testing
@testable import OfflineAgent

/// `ManifestDecision`: what a sync does with a verified manifest, as a table over plain
/// values, and which facts it asks for (a fact that costs a file read or a process is
/// asked only when the rules before it let the manifest through).
@Suite("Manifest decision")
struct ManifestDecisionTests {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)
    static let package = String(repeating: "a", count: 64)
    static let other = String(repeating: "b", count: 64)

    /// One row: the manifest and the device, what is decided, and the facts asked on the way.
    struct Row: Sendable, CustomTestStringConvertible {
        var name: String
        var offered = "1.1.0"
        var packageSha256 = ManifestDecisionTests.package
        var installed: String? = "1.0.0"
        var stage: Int?
        var schedule: (publishedAgo: Double, steps: [(after: Int, percent: Int)])?
        var wifiOnly = false
        var refusal: SyncResult?
        var originRefusal: OfflineAgentError?
        var bucket = 50
        var network = NetworkKind.unmetered
        /// The manifest's epoch, the highest the device accepted and its installed version's.
        var epoch = 0
        var knownEpoch = 0
        var installedEpoch = 0
        var expected: Expected
        var asked: [ManifestDecision.Fact]

        enum Expected: Sendable, Equatable {
            case epochRollback, downgrade, refused(SyncResult), originRefused(OfflineAgentError.Cause), differentPackage, sameVersion, notInStage(Int, Int), deferred, install
        }

        var testDescription: String { name }

        var manifest: Manifest {
            var manifest = Manifest(
                app: "mall", version: Version(offered)!, miniVersion: Version("0.9.0")!, isPatch: false, url: "p.zip", size: 1,
                sha256: packageSha256, packageSha256: packageSha256, whitelist: ["https://h5.example.com/new/"],
                networkType: wifiOnly ? .wifi : .any, rollout: 30)
            manifest.stage = stage
            manifest.epoch = epoch
            if let schedule {
                manifest.format = 2
                manifest.publishedAt = ManifestDecisionTests.now.addingTimeInterval(-schedule.publishedAgo)
                manifest.stageSchedule = schedule.steps.map { ManifestStageStep(afterSeconds: Int64($0.after), percent: $0.percent) }
            }
            return manifest
        }

        var record: InstalledVersion? {
            installed.map {
                InstalledVersion(
                    version: Version($0)!, packageSha256: ManifestDecisionTests.package, miniVersion: Version("0.1.0")!,
                    whitelist: ["https://h5.example.com/old/"], rollout: 100, installedAt: ManifestDecisionTests.now, via: .full)
            }
        }
    }

    static let rows: [Row] = [
        Row(name: "a newer version with nothing in its way installs", expected: .install, asked: [.lifecycleRefusal, .originClaim]),
        Row(name: "a first install installs", installed: nil, expected: .install, asked: [.lifecycleRefusal, .originClaim]),
        Row(name: "a downgrade is refused before anything is recorded", offered: "0.9.0", expected: .downgrade, asked: []),
        Row(name: "a downgrade is refused even when held", offered: "0.9.9", refusal: .held, expected: .downgrade, asked: []),
        Row(name: "a version marked bad is refused", refusal: .knownBad, expected: .refused(.knownBad), asked: [.lifecycleRefusal]),
        Row(name: "a held app keeps its version", refusal: .held, expected: .refused(.held), asked: [.lifecycleRefusal]),
        Row(name: "the lifecycle's refusal comes before the stage", stage: 0, refusal: .held, expected: .refused(.held),
            asked: [.lifecycleRefusal]),
        Row(name: "an origin the device does not allow is refused before the stage", stage: 0,
            originRefusal: OfflineAgentError(.manifest, "not allowed", cause: .originNotAllowed),
            expected: .originRefused(.originNotAllowed), asked: [.lifecycleRefusal, .originClaim]),
        Row(name: "an origin another app holds is refused even for the installed version", offered: "1.0.0",
            originRefusal: OfflineAgentError(.manifest, "claimed", cause: .originClaimed),
            expected: .originRefused(.originClaimed), asked: [.lifecycleRefusal, .originClaim]),
        Row(name: "the same version and package rewrite the record", offered: "1.0.0", stage: 0, wifiOnly: true,
            network: .metered, expected: .sameVersion, asked: [.lifecycleRefusal, .originClaim]),
        Row(name: "the same version with another package is an error", offered: "1.0.0", packageSha256: other,
            expected: .differentPackage, asked: [.lifecycleRefusal, .originClaim]),
        Row(name: "stage 100 never reads the device id", stage: 100, bucket: 100, expected: .install, asked: [.lifecycleRefusal, .originClaim]),
        Row(name: "a bucket at the stage is in", stage: 50, bucket: 50, expected: .install, asked: [.lifecycleRefusal, .originClaim, .bucket]),
        Row(name: "a bucket above the stage waits", stage: 49, bucket: 50, expected: .notInStage(49, 50),
            asked: [.lifecycleRefusal, .originClaim, .bucket]),
        Row(name: "stage 0 excludes every device", stage: 0, bucket: 1, expected: .notInStage(0, 1), asked: [.lifecycleRefusal, .originClaim, .bucket]),
        Row(name: "a schedule not begun excludes everyone", schedule: (30, [(60, 10), (120, 100)]), bucket: 1,
            expected: .notInStage(0, 1), asked: [.lifecycleRefusal, .originClaim, .bucket]),
        Row(name: "a schedule's step in force admits its buckets", schedule: (90, [(60, 10), (120, 100)]), bucket: 10,
            expected: .install, asked: [.lifecycleRefusal, .originClaim, .bucket]),
        Row(name: "a schedule's last step at 100 reads no device id", schedule: (200, [(60, 10), (120, 100)]), bucket: 100,
            expected: .install, asked: [.lifecycleRefusal, .originClaim]),
        Row(name: "a wifi manifest on a metered network is deferred", wifiOnly: true, network: .metered, expected: .deferred,
            asked: [.lifecycleRefusal, .originClaim, .network]),
        Row(name: "a wifi manifest on an unmetered network installs", wifiOnly: true, expected: .install,
            asked: [.lifecycleRefusal, .originClaim, .network]),
        Row(name: "outside the stage, the network is not asked", stage: 10, wifiOnly: true, bucket: 11, network: .metered,
            expected: .notInStage(10, 11), asked: [.lifecycleRefusal, .originClaim, .bucket]),
        Row(name: "in the stage, a metered network still defers", stage: 10, wifiOnly: true, bucket: 10, network: .metered,
            expected: .deferred, asked: [.lifecycleRefusal, .originClaim, .bucket, .network]),
        Row(name: "an any-network manifest on a metered network installs", network: .metered, expected: .install,
            asked: [.lifecycleRefusal, .originClaim]),
        // Epochs: (epoch, version) never goes down; a lower epoch is a replay.
        Row(name: "a higher epoch offers a lower version: the recovery installs", offered: "1.0.1", installed: "999999999.0.0",
            epoch: 1, expected: .install, asked: [.lifecycleRefusal, .originClaim]),
        Row(name: "the same epoch still refuses a lower version", offered: "1.0.1", installed: "999999999.0.0",
            epoch: 1, knownEpoch: 1, installedEpoch: 1, expected: .downgrade, asked: []),
        Row(name: "a lower epoch is refused before anything, even offering a newer version", offered: "2.0.0",
            epoch: 0, knownEpoch: 1, installedEpoch: 1, expected: .epochRollback, asked: []),
        Row(name: "a replay of the version published too high is refused after the recovery", offered: "999999999.0.0", installed: "1.0.1",
            epoch: 0, knownEpoch: 1, installedEpoch: 1, expected: .epochRollback, asked: []),
        Row(name: "a device that saw the new epoch but kept the old version still moves down", offered: "1.0.1", installed: "999999999.0.0",
            stage: 50, bucket: 10, epoch: 1, knownEpoch: 1, installedEpoch: 0, expected: .install, asked: [.lifecycleRefusal, .originClaim, .bucket]),
        Row(name: "a higher epoch is refused as usual by the lifecycle", offered: "1.0.1", installed: "999999999.0.0",
            refusal: .knownBad, epoch: 2, knownEpoch: 1, installedEpoch: 1, expected: .refused(.knownBad), asked: [.lifecycleRefusal]),
        Row(name: "a higher epoch with the installed version rewrites its record", offered: "1.0.0",
            epoch: 1, expected: .sameVersion, asked: [.lifecycleRefusal, .originClaim]),
    ]

    @Test("each manifest and device gets its decision, asking only for the facts it needs", arguments: rows)
    func table(_ row: Row) throws {
        var facts = ManifestFacts(
            manifest: row.manifest, installed: row.record, now: Self.now, knownEpoch: row.knownEpoch, installedEpoch: row.installedEpoch)
        var asked: [ManifestDecision.Fact] = []
        var decision = ManifestDecision.decide(facts)
        // Each fact is asked once at most: four facts, five steps bound the loop.
        for _ in 0..<5 {
            guard case .needs(let fact) = decision else { break }
            #expect(!asked.contains(fact), "asked for \(fact) twice")
            asked.append(fact)
            switch fact {
            case .lifecycleRefusal: facts.lifecycleRefusal = .some(row.refusal)
            case .originClaim: facts.originRefusal = .some(row.originRefusal)
            case .bucket: facts.bucket = row.bucket
            case .network: facts.network = row.network
            }
            decision = ManifestDecision.decide(facts)
        }
        #expect(asked == row.asked)
        let got: Row.Expected? = switch decision {
        case .refuseEpoch(let offered, let known): offered == row.epoch && known == row.knownEpoch ? .epochRollback : nil
        case .refuseDowngrade(let offered, let installed):
            offered == row.manifest.version && installed == row.record?.version ? .downgrade : nil
        case .refused(let result): .refused(result)
        case .originRefused(let error): .originRefused(error.cause)
        case .differentPackage(let version): version == row.record?.version ? .differentPackage : nil
        case .recordSameVersion: .sameVersion
        case .notInStage(let stage, let bucket): .notInStage(stage, bucket)
        case .deferred: .deferred
        case .install: .install
        case .needs: nil
        }
        #expect(got == row.expected, "decided \(decision)")
    }

    @Test("the same version's record takes the manifest's rollout, whitelist and miniVersion, and nothing else")
    func sameVersionRecord() throws {
        let row = Row(name: "same", offered: "1.0.0", expected: .sameVersion, asked: [])
        let old = try #require(row.record)
        let decision = ManifestDecision.decide(ManifestFacts(manifest: row.manifest, installed: old, now: Self.now, lifecycleRefusal: .some(nil), originRefusal: .some(nil)))
        guard case .recordSameVersion(let record) = decision else {
            Issue.record("decided \(decision)")
            return
        }
        var expected = old
        expected.rollout = 30
        expected.whitelist = ["https://h5.example.com/new/"]
        expected.miniVersion = Version("0.9.0")!
        #expect(record == expected)
    }

    @Test("the ETag sent is the one obtained with the version installed now", arguments: [
        ("1.0.0", "1.0.0", "\"e\""), ("1.0.0", "1.1.0", nil), ("", nil, "\"e\""), ("", "1.0.0", nil), ("1.0.0", nil, nil),
    ] as [(String, String?, String?)])
    func requestETag(etagCurrent: String, installed: String?, sent: String?) {
        let check = CheckState(etag: "\"e\"", etagCurrent: etagCurrent)
        #expect(ManifestDecision.requestETag(check, installed: installed.flatMap(Version.init)) == sent)
    }

    @Test("a trusted manifest's miniVersion only rises and drops the ETag; an installed version keeps the answer's")
    func checkStates() {
        let row = Row(name: "plan", expected: .install, asked: [])
        var manifest = row.manifest
        for (known, offered, kept) in [("1.2.0", "0.9.0", "1.2.0"), ("0.5.0", "0.9.0", "0.9.0"), (nil, "0.9.0", "0.9.0")] as [(String?, String, String)] {
            manifest.miniVersion = Version(offered)!
            let check = CheckState(etag: "\"old\"", etagCurrent: "1.0.0", knownMiniVersion: known.flatMap(Version.init))
            let planned = ManifestDecision.planned(check, manifest: manifest, installed: Version("1.0.0"))
            #expect(planned.knownMiniVersion == Version(kept))
            #expect(planned.etag == nil)
            let settled = ManifestDecision.settled(planned, etag: "\"new\"", current: manifest.version, epoch: 0)
            #expect(settled.etag == "\"new\"" && settled.etagCurrent == "1.1.0" && settled.knownMiniVersion == Version(kept))
        }
    }

    @Test("a higher epoch is recorded once trusted, pins the installed version's epoch and restarts miniVersion; only a settle moves it")
    func epochStates() {
        let row = Row(name: "epoch", offered: "1.0.1", epoch: 1, expected: .install, asked: [])
        let high = Version("999999999.0.0")!
        let before = CheckState(knownMiniVersion: high)
        // Before any epoch: the installed version counts as epoch 0.
        #expect(ManifestDecision.installedEpoch(before, installed: high) == 0)
        let planned = ManifestDecision.planned(before, manifest: row.manifest, installed: high)
        #expect(planned.knownEpoch == 1)
        #expect(planned.knownMiniVersion == Version("0.9.0"), "the old epoch's miniVersion would make the recovery unusable")
        // Not installed yet (outside the stage): the installed version is still of epoch 0, so the recovery stays open.
        #expect(ManifestDecision.installedEpoch(planned, installed: high) == 0)
        // A replay of epoch 0 neither lowers the epoch nor raises miniVersion past the new epoch's rules.
        var replay = row.manifest
        replay.epoch = 0
        replay.miniVersion = high
        let replayed = ManifestDecision.planned(planned, manifest: replay, installed: high)
        #expect(replayed.knownEpoch == 1)
        let settled = ManifestDecision.settled(planned, etag: nil, current: row.manifest.version, epoch: 1)
        #expect(ManifestDecision.installedEpoch(settled, installed: row.manifest.version) == 1)
        // A version the lifecycle rolled back to has no epoch of its own: it counts as the highest accepted.
        #expect(ManifestDecision.installedEpoch(settled, installed: high) == 1)
    }
}
