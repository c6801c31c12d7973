import Foundation
import Logging
import Synchronization
import Testing
@testable import OfflineAgent
@testable import OfflinePublish
@testable import OfflineServer
import TestSupport

/// Issue 37: `offline-server --timestamp-key` keeps `metadata/timestamp.json` fresh by
/// itself, with the timestamp key and only that key. On an injected clock: re-signed
/// (version + 1, the same snapshot) once less than half its lifetime is left, left alone
/// otherwise, not re-signed with a key the root no longer names. As processes: a key that
/// also holds another role, or is not the timestamp key, is refused at start (exit 64,
/// one line); a due timestamp is re-signed before the server listens, and python-tuf's
/// ngclient and our client take it after the old one has expired; with a short lifetime
/// it re-signs on its own bounded schedule, every read of the file meanwhile whole.
@Suite("offline-server keeps the TUF timestamp fresh", .serialized)
struct TimestampKeeperTests {
    typealias F = PublishFixtures

    final class Clock: Sendable {
        private let value: Mutex<Date>
        init(_ date: Date) { value = Mutex(date) }
        var now: Date { value.withLock { $0 } }
        func set(_ date: Date) { value.withLock { $0 = date } }
    }

    /// A publish directory of `mall` 1.0.0 whose root (version 2) gives the timestamp role
    /// a key of its own; the release key keeps root, targets and snapshot, and with
    /// `releaseToo` stays a timestamp key as well (threshold 1: release verbs still sign
    /// their timestamp, the server signs with its own key). Its timestamp, signed with the
    /// timestamp key, expires at `timestampExpires`.
    static func splitRepository(
        _ dir: TemporaryDirectory, now: Date, timestampExpires: Date, releaseToo: Bool = false
    ) throws -> (out: String, release: SigningKey, stamp: SigningKey) {
        let out = dir.file("publish"), release = SigningKey.generate(), stamp = SigningKey.generate()
        var options = PublishOptions(
            app: "mall", version: Version("1.0.0")!, sourceDirectory: F.sampleApp("1.0.0"), publishDirectory: out,
            whitelist: ["https://h5.example.com/mall/"], signingKey: release)
        options.now = now
        _ = try Publisher.publish(options)
        let proposal = dir.file("root-2.json")
        try TUFRootRotation.propose(
            publishDirectory: out, file: proposal, changes: ["timestamp": .init(keys: [stamp.key.publicKey] + (releaseToo ? [release.key.publicKey] : []))],
            expires: now.addingTimeInterval(365 * 86_400))
        _ = try TUFRootRotation.sign(file: proposal, key: release)
        _ = try TUFRootRotation.commit(publishDirectory: out, file: proposal, now: now)
        try TUFRepository.refreshTimestamp(publishDirectory: out, key: stamp, expires: timestampExpires)
        return (out, release, stamp)
    }

    static func timestamp(_ out: String) throws -> TUFTimestamp {
        try TUFTimestamp(Data(contentsOf: URL(fileURLWithPath: "\(out)/metadata/timestamp.json")))
    }

    static func latestRoot(_ out: String) throws -> TUFRoot {
        try #require(try TUFRepository.latestRoot(in: "\(out)/metadata")).1
    }

    /// Whole seconds: metadata writes `expires` to the second.
    static func wholeNow() -> Date { Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down)) }

    @Test("on an injected clock: due with less than half its life left, re-signed once, version + 1, the same snapshot; a device past the old expiry updates; a key the root drops signs nothing")
    func rounds() async throws {
        let dir = TemporaryDirectory("ts-keeper")
        let now = Self.wholeNow()
        let (out, release, stamp) = try Self.splitRepository(dir, now: now, timestampExpires: now.addingTimeInterval(3_600))
        let before = try Self.timestamp(out)
        let clock = Clock(now)
        let keeper = try TimestampKeeper(
            directory: out, keeping: TimestampKeeping(key: stamp, lifetime: 86_400), logger: Logger(label: "test"), now: { clock.now })

        // One hour left of a day's lifetime: re-signed, valid for a day from now.
        var wait = await keeper.round()
        var current = try Self.timestamp(out)
        #expect(current.metadata.version == before.metadata.version + 1)
        #expect(current.snapshot.version == before.snapshot.version)
        #expect(current.metadata.expires == now.addingTimeInterval(86_400))
        #expect(wait == 3_600, "the longest wait is an hour")
        try Self.latestRoot(out).verify(current.metadata, as: "timestamp")

        // Not due (a day left): nothing written.
        clock.set(now.addingTimeInterval(60))
        wait = await keeper.round()
        #expect(try Self.timestamp(out).metadata.version == current.metadata.version && wait == 3_600)
        // 11 h 59 min left: due again.
        clock.set(now.addingTimeInterval(12 * 3_600 + 60))
        wait = await keeper.round()
        current = try Self.timestamp(out)
        #expect(current.metadata.version == before.metadata.version + 2 && wait == 3_600)
        #expect(current.metadata.expires == clock.now.addingTimeInterval(86_400))
        // Due, but a verb holding the repository's lock re-signs first: the keeper waits for
        // the lock and, deciding under it, leaves the verb's timestamp as it is.
        clock.set(now.addingTimeInterval(25 * 3_600))
        var lock: PublishLock? = try PublishLock(app: TUFRepository.directoryName, publishDirectory: out)
        let waiting = Task { await keeper.round() }
        try await Task.sleep(for: .milliseconds(300))
        var signed = TUFSigner.common(type: "timestamp", version: current.metadata.version + 1, expires: clock.now.addingTimeInterval(7 * 86_400))
        signed["meta"] = .object(["snapshot.json": TUFMetaFile(version: current.snapshot.version).json])
        try FileSystem.writeAtomically(try TUFSigner.file(signed, keys: [stamp]), to: "\(out)/metadata/timestamp.json")
        #expect(lock != nil)
        lock = nil
        _ = await waiting.value
        #expect(try Self.timestamp(out).metadata.version == current.metadata.version + 1, "the verb's timestamp, not bumped again")
        current = try Self.timestamp(out)

        // A device whose clock reads 2 h on (the first timestamp would have expired) updates.
        let server = try await OfflineServerProcess(arguments: ["--dir", out, "--no-reports"])
        let deviceClock = Clock(now.addingTimeInterval(2 * 3_600))
        var configuration = AgentConfiguration()
        configuration.clock = { deviceClock.now }
        let agent = Agent(root: URL(fileURLWithPath: dir.file("device")), configuration: configuration)
        var options = SyncOptions()
        options.force = true
        options.trustedRoot = try Data(contentsOf: URL(fileURLWithPath: "\(out)/metadata/1.root.json"))
        let report = await agent.sync(app: "mall", manifest: URL(string: "\(server.baseURL)/mall/manifest.json")!, options: options)
        await server.stop()
        #expect(report.result == .updated && report.version == Version("1.0.0"), "\(report.error?.description ?? "")")

        // The root moves the timestamp role to another key: the keeper's key signs nothing more.
        let proposal = dir.file("root-3.json")
        try TUFRootRotation.propose(
            publishDirectory: out, file: proposal, changes: ["timestamp": .init(keys: [SigningKey.generate().key.publicKey])],
            expires: now.addingTimeInterval(365 * 86_400))
        _ = try TUFRootRotation.sign(file: proposal, key: release)
        _ = try TUFRootRotation.commit(publishDirectory: out, file: proposal, now: now)
        clock.set(current.metadata.expires.addingTimeInterval(-3_600))
        wait = await keeper.round()
        #expect(try Self.timestamp(out).metadata.version == current.metadata.version, "nothing signed with a key root 3 does not name")
        #expect(wait == keeper.retryWait && wait <= 60)
    }

    /// `offline-server ARGUMENTS --port 0` bounded by 60 s (a server that failed to refuse would run on).
    static func server(_ arguments: [String]) async throws -> CLI.Result {
        try await CLI.run(["60", CLI.server] + arguments + ["--port", "0"], executable: "/usr/bin/timeout")
    }

    @Test("refused at start, exit 64 in one line: the one key of every role, a key the root does not name for timestamp, no TUF metadata, a lifetime under 2 s")
    func refusals() async throws {
        let dir = TemporaryDirectory("ts-keeper-refusals")
        let now = Self.wholeNow()
        let (out, release, stamp) = try Self.splitRepository(dir, now: now, timestampExpires: now.addingTimeInterval(86_400))
        let releaseFile = dir.file("release.key"), stampFile = dir.file("stamp.key"), strangerFile = dir.file("stranger.key")
        try release.write(to: releaseFile)
        try stamp.write(to: stampFile)
        let stranger = SigningKey.generate()
        try stranger.write(to: strangerFile)
        let fingerprint = { (key: SigningKey) in TUFSigner.key(key).fingerprint }

        // The release key holds root, targets and snapshot (and was the timestamp key of root 1).
        var result = try await Self.server(["--dir", out, "--no-reports", "--timestamp-key", releaseFile])
        var lines = result.stderr.split(separator: "\n")
        #expect(result.status == 64 && lines.count == 1, "\(result.stderr)")
        #expect(result.stderr.contains("is not the key metadata/2.root.json names for timestamp"), "\(result.stderr)")
        #expect(result.stderr.contains(fingerprint(release)) && result.stderr.contains(fingerprint(stamp)), "both fingerprints: \(result.stderr)")

        result = try await Self.server(["--dir", out, "--no-reports", "--timestamp-key", strangerFile])
        lines = result.stderr.split(separator: "\n")
        #expect(result.status == 64 && lines.count == 1, "\(result.stderr)")
        #expect(result.stderr.contains(fingerprint(stranger)) && result.stderr.contains(fingerprint(stamp)), "\(result.stderr)")

        // The simple path: one key for every role. A server holding it online could ship packages.
        let simple = dir.file("simple"), simpleKey = dir.file("simple.key")
        #expect(try await CLI.run(["keygen", "--out", simpleKey], executable: CLI.publisher).status == 0)
        #expect(try await CLI.run(
            ["publish", "--app", "mall", "--version", "1.0.0", "--source", F.sampleApp("1.0.0"), "--out", simple,
             "--whitelist", "https://h5.example.com/mall/", "--key", simpleKey], executable: CLI.publisher).status == 0)
        let timestampBefore = try Self.timestamp(simple).metadata.version
        result = try await Self.server(["--dir", simple, "--no-reports", "--timestamp-key", simpleKey])
        lines = result.stderr.split(separator: "\n")
        #expect(result.status == 64 && lines.count == 1, "\(result.stderr)")
        #expect(result.stderr.contains("is also the root, targets, snapshot key of metadata/1.root.json"), "\(result.stderr)")
        #expect(try Self.timestamp(simple).metadata.version == timestampBefore, "nothing signed")

        // A directory without TUF metadata.
        let plain = dir.file("plain")
        try FileManager.default.createDirectory(atPath: plain, withIntermediateDirectories: true)
        result = try await Self.server(["--dir", plain, "--no-reports", "--timestamp-key", stampFile])
        #expect(result.status == 64 && result.stderr.contains("needs a TUF repository"), "\(result.stderr)")

        result = try await Self.server(["--dir", out, "--no-reports", "--timestamp-key", stampFile, "--timestamp-expires", "1s"])
        #expect(result.status == 64 && result.stderr.contains("--timestamp-expires"), "\(result.stderr)")
        result = try await Self.server(["--dir", out, "--no-reports", "--timestamp-expires", "1d"])
        #expect(result.status == 64 && result.stderr.contains("needs --timestamp-key"), "\(result.stderr)")
    }

    @Test("a due timestamp is re-signed before the server listens; after the old one expired, python-tuf's ngclient and offline-agent take the new one; a release verb beside it still publishes")
    func serverProcess() async throws {
        let dir = TemporaryDirectory("ts-keeper-process")
        let now = Self.wholeNow()
        // The repository's timestamp expires in 3 s: nobody re-signs it but the server.
        let (out, release, stamp) = try Self.splitRepository(dir, now: now, timestampExpires: now.addingTimeInterval(3), releaseToo: true)
        let stampFile = dir.file("stamp.key"), releaseFile = dir.file("release.key")
        try stamp.write(to: stampFile)
        try release.write(to: releaseFile)
        let old = try Self.timestamp(out)
        let server = try await OfflineServerProcess(arguments: ["--dir", out, "--no-reports", "--timestamp-key", stampFile, "--timestamp-expires", "1d"])
        let fresh = try Self.timestamp(out)
        #expect(fresh.metadata.version == old.metadata.version + 1 && fresh.snapshot.version == old.snapshot.version)
        #expect(fresh.metadata.expires > Date().addingTimeInterval(23 * 3_600))

        // The old timestamp has expired by now (a bounded wait of at most 4 s).
        let left = old.metadata.expires.timeIntervalSinceNow + 1
        if left > 0 { try await Task.sleep(for: .milliseconds(Int64(left * 1000))) }
        if PythonTUF.missing == nil {
            let seen = try #require(CLI.json(try await PythonTUF.run("ngclient.py", [server.baseURL, "\(out)/metadata/1.root.json", dir.file("ngclient"), "mall"])))
            #expect(seen["version"] as? String == "1.0.0" && seen["timestamp"] as? Int == Int(fresh.metadata.version), "\(seen)")
        }
        let sync = ["sync", "--root", dir.file("device"), "--app", "mall", "--manifest", "\(server.baseURL)/mall/manifest.json",
                    "--trusted-root", "\(out)/metadata/1.root.json", "--force", "--json"]
        var result = try await CLI.run(sync)
        var report = try #require(CLI.json(result.stdout), "\(result.stderr)")
        #expect(report["result"] as? String == "updated" && report["version"] as? String == "1.0.0", "\(report)")

        // The release key is a timestamp key too (the root names both, threshold 1): a verb
        // signs its own timestamp, the server leaves it until it falls due.
        let publish = try await CLI.run(
            ["publish", "--app", "mall", "--version", "1.1.0", "--source", F.sampleApp("1.1.0"), "--out", out, "--key", releaseFile],
            executable: CLI.publisher)
        #expect(publish.status == 0, "\(publish.stderr)")
        result = try await CLI.run(sync)
        report = try #require(CLI.json(result.stdout), "\(result.stderr)")
        #expect(report["result"] as? String == "updated" && report["version"] as? String == "1.1.0", "\(report)")
        await server.stop()
    }

    @Test("with a 2-second lifetime the server re-signs on its own schedule; every read of timestamp.json meanwhile is whole and verifies")
    func schedule() async throws {
        let dir = TemporaryDirectory("ts-keeper-schedule")
        let now = Self.wholeNow()
        let (out, _, stamp) = try Self.splitRepository(dir, now: now, timestampExpires: now.addingTimeInterval(1))
        let stampFile = dir.file("stamp.key")
        try stamp.write(to: stampFile)
        let root = try Self.latestRoot(out)
        let server = try await OfflineServerProcess(arguments: ["--dir", out, "--no-reports", "--timestamp-key", stampFile, "--timestamp-expires", "2s"])
        defer { server.stopInBackground() }
        // Bounded: two more signings within 30 s (one about every second is expected).
        let start = try Self.timestamp(out)
        let deadline = ContinuousClock.now + .seconds(30)
        var current = start, reads = 0
        while current.metadata.version < start.metadata.version + 2, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
            current = try Self.timestamp(out)
            try root.verify(current.metadata, as: "timestamp")
            reads += 1
        }
        #expect(current.metadata.version >= start.metadata.version + 2, "the server re-signs on its schedule (\(reads) reads)")
        #expect(current.snapshot.version == start.snapshot.version)
    }
}
