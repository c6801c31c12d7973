import Foundation
@testable import OfflineAgent
@testable import OfflinePublish
import OfflineServer
import TestSupport
import Testing

/// The auto-halt-only key (issue 37): `offline-server --auto-halt --halt-key` halts with
/// the key of the app's halt role, which TUF devices apply to narrow that manifest's stage
/// and nothing else. With that key stolen, no package ships and no stage widens.
@Suite("TUF halt key")
struct TUFHaltKeyTests {
    typealias C = FleetReportClient

    /// `fleet` 1.0.0, then 2.0.0 staged at 50 %, released with `release` (root and
    /// targets); `online` signs snapshot and timestamp (a rotated root) and holds fleet's
    /// halt role.
    static func repository(_ dir: String) throws -> (release: SigningKey, online: SigningKey) {
        let release = SigningKey.generate(), online = SigningKey.generate()
        try AutoHaltTests.publishStaged(dir, key: release, stage: 50)
        let proposal = dir + "/root-next.json"
        let change = TUFRootRotation.RoleChange(keys: [online.key.publicKey])
        try TUFRootRotation.propose(
            publishDirectory: dir, file: proposal, changes: ["snapshot": change, "timestamp": change], expires: Date().addingTimeInterval(300 * 86_400))
        try TUFRootRotation.sign(file: proposal, key: release)
        try TUFRootRotation.commit(publishDirectory: dir, file: proposal)
        try TUFRepository.delegate(
            app: "fleet", publishDirectory: dir, appKey: online, halt: true, keys: TUFKeys(targets: [release], snapshot: [online], timestamp: [online]),
            now: Date())
        return (release, online)
    }

    /// A fresh device `device` syncing fleet with the repository's first root.
    static func sync(_ dir: String, _ base: String, device: String) async throws -> SyncReport {
        var options = SyncOptions(force: true)
        options.trustedRoot = try Data(contentsOf: URL(fileURLWithPath: dir + "/metadata/1.root.json"))
        options.deviceID = device
        return await Agent(root: URL(fileURLWithPath: dir + "/agent-\(device)"), configuration: SyncHarness.hangBounds()).sync(
            app: "fleet", manifest: URL(string: base + "/fleet/manifest.json")!, options: options)
    }

    static func file(_ path: String) -> Data? { FileManager.default.contents(atPath: path) }

    @Test("auto-halt with --halt-key writes rollout.json and the halt role only; devices on a root stop taking the version; the operator's resume is a new manifest it no longer narrows")
    func serverHaltsWithHaltKey() async throws {
        let dir = try PublishFixtures.temporaryDirectory("tuf-halt-key")
        defer { PublishFixtures.cleanUp(dir) }
        let (release, online) = try Self.repository(dir)
        var configuration = ReferenceServer.Configuration(directory: dir, port: 0, reportsDatabase: dir + "/reports.sqlite")
        configuration.autoHalt = try AutoHaltRules(parsing: "failure-rate>0%,min-devices=1")
        configuration.haltKey = online
        let server = try await ReferenceServer(configuration: configuration).start()
        defer { Task { await server.stop() } }
        let base = server.baseURL
        let inside = AutoHaltTests.devices("h", inStage: true, stage: 50, count: 4)

        let first = try await Self.sync(dir, base, device: inside[0])
        #expect(first.result == .updated && first.version == Version("2.0.0"), "\(String(describing: first.error))")
        let manifest = Self.file(dir + "/fleet/manifest.json"), state = try AutoHaltTests.state(dir)

        #expect(try await C.post(base, try C.body([C.event("failed", device: inside[1], version: "2.0.0")])).receipt?.accepted == 1)
        // Halted by the rollout file, signed by the halt key: the manifest and state.json as they were.
        #expect(TUFRepository.rolloutStage(app: "fleet", publishDirectory: dir) == 0)
        let stateAfter = try AutoHaltTests.state(dir)
        #expect(Self.file(dir + "/fleet/manifest.json") == manifest && stateAfter == state)
        let halted = try await Self.sync(dir, base, device: inside[2])
        #expect(halted.result == .notInStage, "\(String(describing: halted.error))")
        // Another failing batch halts nothing twice: no new metadata.
        let timestamp = Self.file(dir + "/metadata/timestamp.json")
        #expect(try await C.post(base, try C.body([C.event("failed", device: inside[3], version: "2.0.0")])).receipt?.accepted == 1)
        #expect(Self.file(dir + "/metadata/timestamp.json") == timestamp)

        // Another verb of the operator's keeps the halt, now in the state and the manifest.
        try ReleaseEditor.set(app: "fleet", publishDirectory: dir, settings: ReleaseSettings(rollout: 90), key: release, snapshotKey: online)
        #expect(try AutoHaltTests.state(dir).stage == 0)
        #expect(try AutoHaltTests.state(dir).revisions?.last?.reason.contains("(the halt key's)") == true)
        #expect(try await Self.sync(dir, base, device: inside[2]).result == .notInStage)
        // The operator resumes with the release key: a new listing, which the halt does not name.
        try ReleaseEditor.stage(app: "fleet", publishDirectory: dir, percent: 50, key: release, snapshotKey: online)
        #expect(TUFRepository.rolloutStage(app: "fleet", publishDirectory: dir) == nil)
        let resumed = try await Self.sync(dir, base, device: inside[2])
        #expect(resumed.result == .updated, "\(String(describing: resumed.error))")
    }

    @Test("attacker with the halt key (and snapshot and timestamp): a stage never widens, and a manifest listed in the halt role is never read")
    func stolenHaltKeyShipsNothing() async throws {
        let dir = try PublishFixtures.temporaryDirectory("tuf-halt-stolen")
        defer { PublishFixtures.cleanUp(dir) }
        let (release, online) = try Self.repository(dir)
        try ReleaseEditor.stage(app: "fleet", publishDirectory: dir, percent: 0, key: release, snapshotKey: online)
        let server = try await ReferenceServer(configuration: ReferenceServer.Configuration(directory: dir, port: 0)).start()
        defer { Task { await server.stop() } }
        let device = AutoHaltTests.devices("s", inStage: true, stage: 50, count: 1)[0]

        // 1. A rollout file that "widens" the halted manifest to 100 %.
        #expect(try TUFRepository.halt(app: "fleet", publishDirectory: dir, key: online, stage: 100, reason: nil, now: Date()))
        var report = try await Self.sync(dir, server.baseURL, device: device)
        #expect(report.result == .notInStage, "\(String(describing: report.error))")

        // 2. Its own 3.0.0 (built without a key) listed as fleet/manifest.json in the halt
        //    role, with snapshot and timestamp the stolen key can sign.
        let evil = dir + "/evil"
        var options = PublishOptions(
            app: "fleet", version: Version("3.0.0")!, sourceDirectory: PublishFixtures.sampleApp("1.2.0"), publishDirectory: evil,
            whitelist: ["https://h5.example.com/fleet/"], signingKey: nil)
        options.stage = 100
        _ = try Publisher.publish(options)
        var listed: [String: StrictJSON] = [:]
        for name in ["manifest.json", "3.0.0.zip.gz"] {
            let digest = try PublishFileWriter.digest(of: "\(evil)/fleet/\(name)")
            try FileManager.default.copyItem(atPath: "\(evil)/fleet/\(name)", toPath: "\(dir)/fleet/\(digest.sha256).\(name)")
            listed["fleet/\(name)"] = TUFTargetFile(length: digest.size, sha256: digest.sha256).json
        }
        let metadata = dir + "/metadata"
        let (timestamp, snapshot, _) = TUFRepository.currentChain(in: metadata)
        let (oldTimestamp, oldSnapshot) = (try #require(timestamp), try #require(snapshot))
        let role = TUFRepository.haltRole("fleet"), version = try #require(oldSnapshot.meta["\(role).json"]?.version) + 1
        let expires = Date().addingTimeInterval(86_400)
        var signed = TUFSigner.common(type: "targets", version: version, expires: expires)
        signed["targets"] = .object(listed)
        try TUFSigner.file(signed, keys: [online]).write(to: URL(fileURLWithPath: "\(metadata)/\(version).\(role).json"))
        var meta = oldSnapshot.meta
        meta["\(role).json"] = TUFMetaFile(version: version)
        var snapshotSigned = TUFSigner.common(type: "snapshot", version: oldSnapshot.metadata.version + 1, expires: expires)
        snapshotSigned["meta"] = .object(meta.mapValues(\.json))
        try TUFSigner.file(snapshotSigned, keys: [online]).write(to: URL(fileURLWithPath: "\(metadata)/\(oldSnapshot.metadata.version + 1).snapshot.json"))
        var timestampSigned = TUFSigner.common(type: "timestamp", version: oldTimestamp.metadata.version + 1, expires: expires)
        timestampSigned["meta"] = .object(["snapshot.json": TUFMetaFile(version: oldSnapshot.metadata.version + 1).json])
        try TUFSigner.file(timestampSigned, keys: [online]).write(to: URL(fileURLWithPath: "\(metadata)/timestamp.json"))

        report = try await Self.sync(dir, server.baseURL, device: device)
        #expect(report.result == .notInStage, "\(report.result) \(String(describing: report.error))")
        #expect(Store(root: dir + "/agent-\(device)").active("fleet") == nil)
    }

    @Test("halt --percent 100 narrows nothing and renews the halt role's metadata once it is due; before that it writes nothing")
    func renewal() async throws {
        let dir = try PublishFixtures.temporaryDirectory("tuf-halt-renew")
        defer { PublishFixtures.cleanUp(dir) }
        let (_, online) = try Self.repository(dir)
        func haltVersion() -> Int64? { TUFRepository.currentChain(in: dir + "/metadata").snapshot?.meta["fleet.halt.json"]?.version }
        let first = try #require(haltVersion())
        #expect(try TUFRepository.halt(app: "fleet", publishDirectory: dir, key: online, stage: 100, reason: nil, now: Date()))
        let written = try #require(haltVersion())
        #expect(written > first)
        #expect(try !TUFRepository.halt(app: "fleet", publishDirectory: dir, key: online, stage: 100, reason: nil, now: Date()))
        #expect(haltVersion() == written)
        #expect(try TUFRepository.halt(app: "fleet", publishDirectory: dir, key: online, stage: 100, reason: nil, now: Date().addingTimeInterval(50 * 86_400)))
        #expect(try #require(haltVersion()) > written)
        // It narrowed nothing: a device in the stage still takes the version.
        let server = try await ReferenceServer(configuration: ReferenceServer.Configuration(directory: dir, port: 0)).start()
        defer { Task { await server.stop() } }
        let device = AutoHaltTests.devices("r", inStage: true, stage: 50, count: 1)[0]
        let report = try await Self.sync(dir, server.baseURL, device: device)
        #expect(report.result == .updated, "\(String(describing: report.error))")
    }
}
