import Foundation
import Testing
import OfflineAgent
import TestSupport

/// `Progress` of syncs the service did not start: `offline-agent sync` (the CLI, the
/// timer) leaves its step in `<root>/apps/<app>/.progress`, and the service sends it on.
@Suite("D-Bus progress of other processes' syncs", .serialized)
struct DBusProgressTests {
    typealias Setup = DBusServiceTests.Setup

    /// mall 1.1.0 with `megabytes` MiB more, stored: the download is that large.
    static func bigPackage(_ megabytes: Int) async throws -> [UInt8] {
        let work = TemporaryDirectory("big")
        try FileManager.default.copyItem(atPath: "\(Repo.fixtures)/sample-app/1.1.0", toPath: work.file("app"))
        try Data(repeating: 0x5a, count: megabytes << 20).write(to: URL(fileURLWithPath: work.file("app/big.bin")))
        #expect(try await run("zip", ["-q", "-0", "-X", "-r", work.file("big.zip"), "."], cwd: work.file("app")).status == 0)
        return [UInt8](try Data(contentsOf: URL(fileURLWithPath: work.file("big.zip"))))
    }

    /// A server of `bytes` as `/big.zip` that trickles them: 256 KiB every 50 ms, so the
    /// download takes many progress record intervals.
    static func trickling(_ bytes: [UInt8]) throws -> TrickleServer {
        try TrickleServer { target in
            guard target.hasPrefix("/big.zip") else { return [.send(TrickleServer.head(404, length: 0))] }
            return [.send(TrickleServer.head(200, length: bytes.count)), .trickle(bytes, chunk: 256 << 10, pause: 0.05)]
        }
    }

    /// The manifest fields of the full package `bytes` served by `server`.
    static func package(_ bytes: [UInt8], at server: TrickleServer) -> [String: Any] {
        let sha = PackageFixture.sha256(bytes)
        return ["url": "\(server.baseURL)/big.zip", "size": bytes.count, "sha256": sha, "packageSha256": sha]
    }

    @Test("a sync the CLI runs (another process) downloading from a slow server is heard as Progress, 0 < bytes <= total")
    func cliSyncProgress() async throws {
        let s = try await Setup()
        let bytes = try await Self.bigPackage(8)
        let slow = try Self.trickling(bytes)
        s.h.origin.setManifest(s.h.full("1.1.0", Self.package(bytes, at: slow)))

        let (signals, child) = try await DBusMethodTests.signals(s, until: "SyncFinished", [CLI.binary] + s.sync)
        #expect(child["status"] as? Int == 0, "\(child)")
        let progress = signals.filter { $0.0 == "Progress" }
        let downloads = progress.filter { $0.1.first as? String == "mall" && $0.1[1] as? String == "downloading" }
        #expect(!downloads.isEmpty, "\(signals.map(\.0))")
        for download in downloads {
            let done = try #require(download.1[2] as? Int), total = try #require(download.1[3] as? Int)
            #expect(total == bytes.count && done <= total, "\(download.1)")
        }
        #expect(downloads.contains { ($0.1[2] as? Int ?? 0) > 0 }, "\(downloads.map(\.1))")
        #expect(signals.contains { $0.0 == "VersionInstalled" && $0.1 as? [String] == ["mall", "1.1.0", "1.0.0"] }, "\(signals.map(\.0))")
        // The sync leaves no record behind.
        #expect(!FileManager.default.fileExists(atPath: s.h.root.path + "/apps/mall/.progress"))
        // The download was told before the end of the sync it is part of.
        let members = signals.map { $0.0 == "Progress" ? "\($0.0) \($0.1[1])" : $0.0 }
        #expect((members.lastIndex(of: "Progress downloading") ?? .max) < (members.firstIndex(of: "SyncFinished") ?? -1), "\(members)")
    }

    /// An app's first sync makes its directory (`apps/<app>`) and writes the record in it at
    /// once: the service must watch a new app directory as it appears (inotify on `apps/`),
    /// and read a record written before that watch took, or the first install is silent.
    @Test("the first record in a new app's directory, written as the directory appears, is sent as Progress")
    func newAppDirectoryRecord() async throws {
        let s = try await Setup()
        let dir = s.h.root.path + "/apps/shop"
        // As the sync's writer does it: the directory, then a record renamed into place, then nothing more.
        let script = "mkdir \(dir) && printf '{\"phase\":\"downloading\",\"bytes\":7,\"total\":9}' > \(dir)/.x && mv -fT \(dir)/.x \(dir)/.progress && sleep 4"
        let watched = try await s.client(["watch", "15", "Progress", "--", "/bin/sh", "-c", script])
        let progress = (watched["signals"] as? [[String: Any]] ?? []).filter { $0["member"] as? String == "Progress" }
        #expect(progress.count == 1, "\(watched)")
        let only = progress.first?["args"] as? [Any] ?? []
        #expect(only.count == 4 && only[0] as? String == "shop" && only[1] as? String == "downloading"
                && only[2] as? Int == 7 && only[3] as? Int == 9, "\(watched)")
    }

    @Test("the first install of an app (no directory of it yet) by the CLI is heard as Progress, then VersionInstalled with no previous")
    func firstInstallProgress() async throws {
        let s = try await Setup()
        let bytes = try await Self.bigPackage(4)
        let slow = try Self.trickling(bytes)
        s.h.origin.setManifest(s.h.full("1.1.0", Self.package(bytes, at: slow).merging(["app": "shop", "whitelist": ["https://shop.example.com/"]]) { $1 }))
        #expect(!FileManager.default.fileExists(atPath: s.h.root.path + "/apps/shop"))
        let sync = ["sync", "--allow-unsigned", "--root", s.h.root.path, "--app", "shop", "--manifest", s.h.origin.manifestURL.absoluteString, "--force", "--json"]
        let (signals, child) = try await DBusMethodTests.signals(s, until: "SyncFinished", [CLI.binary] + sync)
        #expect(child["status"] as? Int == 0, "\(child)")
        let downloads = signals.filter { $0.0 == "Progress" && $0.1.first as? String == "shop" && $0.1[1] as? String == "downloading" }
        #expect(!downloads.isEmpty, "\(signals.map(\.0))")
        #expect(downloads.allSatisfy { $0.1[3] as? Int == bytes.count && ($0.1[2] as? Int ?? .max) <= bytes.count }, "\(downloads.map(\.1))")
        #expect(signals.contains { $0.0 == "VersionInstalled" && $0.1 as? [String] == ["shop", "1.1.0", ""] }, "\(signals.map(\.0))")
        #expect(try await s.properties("shop")["ActiveVersion"] as? String == "1.1.0")
    }

    @Test("a throttled sync writes no progress record (nor loads the bus library)")
    func throttledWritesNothing() async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        let record = h.root.path + "/apps/mall/.progress"
        try? FileManager.default.removeItem(atPath: record)
        let arguments = ["sync", "--allow-unsigned", "--root", h.root.path, "--app", "mall", "--manifest", h.origin.manifestURL.absoluteString]
        // LD_DEBUG=files: the dynamic loader names every library it loads, dlopen's too.
        let result = try await CLI.run(arguments, environment: ["LD_DEBUG": "files"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stderr.contains("mall: throttled"), "\(result.stderr.suffix(500))")
        #expect(result.stderr.contains("file=") && !result.stderr.contains("libsystemd"), "\(result.stderr.suffix(500))")
        #expect(!FileManager.default.fileExists(atPath: record))
    }

    /// The record is in a root the service's user owns, but it is read as hostile input:
    /// each of these replaces it (atomically, as the writer does) and none is sent on, nor
    /// stops the service; the well-formed record after them is.
    @Test("hostile progress records (huge, not JSON, bad numbers and phases, a link, a FIFO) send nothing and stop nothing")
    func hostileRecords() async throws {
        let s = try await Setup()
        let dir = s.h.root.path + "/apps/mall"
        let replace = { (make: String) in "\(make) && mv -fT \(dir)/.x \(dir)/.progress && sleep 0.05" }
        let script = [
            replace("head -c 1048576 /dev/zero | tr '\\0' ' ' > \(dir)/.x; printf '{\"phase\":\"downloading\",\"bytes\":1,\"total\":2}' >> \(dir)/.x"),
            replace("printf 'not json' > \(dir)/.x"),
            replace("printf '{\"phase\":\"downloading\",\"bytes\":-1,\"total\":2}' > \(dir)/.x"),
            replace("printf '{\"phase\":\"downloading\",\"bytes\":1e999,\"total\":2}' > \(dir)/.x"),
            replace("printf '{\"phase\":\"downloading\",\"bytes\":99999999999999999999999,\"total\":2}' > \(dir)/.x"),
            replace("printf '{\"phase\":\"downloading\",\"bytes\":3,\"total\":2}' > \(dir)/.x"),
            replace("printf '{\"phase\":\"%s\",\"bytes\":1,\"total\":2}' $(head -c 300 /dev/zero | tr '\\0' a) > \(dir)/.x"),
            replace("printf '{\"phase\":\"rm -rf\",\"bytes\":1,\"total\":2}' > \(dir)/.x"),
            replace("printf '{\"phase\":\"downloading\"}' > \(dir)/.x"),
            replace("ln -sf /dev/zero \(dir)/.x"),
            replace("rm -f \(dir)/.x && mkfifo \(dir)/.x"),
            replace("printf '{\"phase\":\"downloading\",\"bytes\":5,\"total\":10}' > \(dir)/.x"),
        ].joined(separator: " && ")
        let (signals, child) = try await DBusMethodTests.signals(s, until: "Progress", ["/bin/sh", "-c", script])
        #expect(child["status"] as? Int == 0, "\(child)")
        let progress = signals.filter { $0.0 == "Progress" }
        #expect(progress.count == 1, "\(progress.map(\.1))")
        let only = try #require(progress.first?.1)
        #expect(only.count == 4 && only[0] as? String == "mall" && only[1] as? String == "downloading"
                && only[2] as? Int == 5 && only[3] as? Int == 10, "\(only)")
        // Still serving.
        #expect(try await s.properties()["ActiveVersion"] as? String == "1.0.0")
    }
}
