import Foundation
import OfflineAgent
@testable import OfflinePublish
@testable import OfflineServer
import TestSupport
import Testing

/// Issue 37: `/stats` and the dashboard warn before the publish directory's TUF metadata
/// runs out, with the notices `offline-agent status --json` gives for a device and the
/// lines `offline-publish` prints (one shared `TUFExpiryNotice`/`MetadataExpiryWarning`).
@Suite("TUF metadata expiry on /stats and the dashboard", .serialized)
struct MetadataExpiryStatsTests {
    /// `/stats?app=mall`'s `metadata`, by role.
    static func metadata(_ base: String) async throws -> [String: [String: Any]] {
        let roles = try #require(try await FleetStats.stats(base, app: "mall")["metadata"] as? [[String: Any]])
        return Dictionary(uniqueKeysWithValues: roles.map { ($0["role"] as? String ?? "?", $0) })
    }

    static func dashboard(_ base: String) async throws -> String {
        let page = try await PublishHTTP.fetch(base + "/dashboard")
        #expect(page.status == 200)
        return String(decoding: page.body, as: UTF8.self)
    }

    @Test("a timestamp 11 h from expiry is soon on /stats and a banner with its fix on the dashboard; a server keeping the timestamp re-signs it and warns of nothing")
    func warnings() async throws {
        let dir = TemporaryDirectory("tuf-expiry-stats")
        let now = TimestampKeeperTests.wholeNow()
        let (out, _, stamp) = try TimestampKeeperTests.splitRepository(dir, now: now, timestampExpires: now.addingTimeInterval(11 * 3_600))
        let version = try TimestampKeeperTests.timestamp(out).metadata.version

        var configuration = ReferenceServer.Configuration(directory: out, port: 0, reportsDatabase: dir.file("reports.sqlite"))
        var server = try await ReferenceServer(configuration: configuration).start()
        var roles = try await Self.metadata(server.baseURL)
        #expect(Set(roles.keys) == ["root", "targets", "snapshot", "timestamp"], "\(roles)")
        #expect(roles["timestamp"]?["soon"] as? Bool == true && roles["timestamp"]?["expired"] as? Bool == false, "\(roles)")
        #expect(roles["timestamp"]?["version"] as? Int == Int(version))
        #expect(roles["root"]?["soon"] as? Bool == false && roles["root"]?["version"] as? Int == 2 && roles["targets"]?["soon"] as? Bool == false)
        var page = try await Self.dashboard(server.baseURL)
        #expect(page.contains("class=\"expiry\" data-metadata-role=\"timestamp\" data-version=\"\(version)\""), "\(page.prefix(3000))")
        #expect(page.contains("run offline-publish timestamp with the timestamp key"))
        #expect(!page.contains("data-metadata-role=\"root\""))
        await server.stop()

        // The server keeps the timestamp: re-signed for a day at start, nothing to warn about.
        configuration.timestampKeeping = TimestampKeeping(key: stamp, lifetime: 86_400)
        server = try await ReferenceServer(configuration: configuration).start()
        roles = try await Self.metadata(server.baseURL)
        #expect(roles["timestamp"]?["soon"] as? Bool == false && roles["timestamp"]?["version"] as? Int == Int(version) + 1, "\(roles)")
        page = try await Self.dashboard(server.baseURL)
        #expect(!page.contains("class=\"expiry\""))
        await server.stop()
    }

    @Test("a directory without TUF metadata: /stats gives an empty list, the dashboard no banner")
    func withoutMetadata() async throws {
        let dir = TemporaryDirectory("tuf-expiry-stats-plain")
        let out = dir.file("publish")
        try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
        let server = try await ReferenceServer(configuration: .init(directory: out, port: 0, reportsDatabase: dir.file("reports.sqlite"))).start()
        let stats = try await FleetStats.stats(server.baseURL, app: "mall")
        #expect((stats["metadata"] as? [Any])?.isEmpty == true, "\(stats)")
        #expect(!(try await Self.dashboard(server.baseURL)).contains("class=\"expiry\""))
        await server.stop()
    }
}
