import Crypto
import Foundation
import OfflineAgent

/// An agent root, an origin serving fixture packages, and manifest builders.
package final class SyncHarness: @unchecked Sendable {
    package static let whitelist = "https://h5.example.com/mall/"
    package let fixture: PackageFixture
    package let origin: Origin
    package let root = TemporaryDirectory("root")
    package var configuration = SyncHarness.hangBounds()

    /// The configuration every in-process agent of the tests starts from: its network bounds
    /// end a hang, never a slow exchange, because the suite runs in parallel on two loaded
    /// cores (the 30 s product default for a manifest exchange was missed there). A test of a
    /// timeout sets its own.
    package static func hangBounds() -> AgentConfiguration {
        var configuration = AgentConfiguration()
        configuration.network.readTimeout = .seconds(120)
        configuration.network.connectTimeout = .seconds(60)
        configuration.network.manifestTimeout = .seconds(120)
        return configuration
    }

    package init(fixture: PackageFixture? = nil) throws {
        self.fixture = try fixture ?? PackageFixture()
        origin = try Origin()
        // The lifecycle's tests (here and through serve) exercise trials: the harness's
        // device turns them on, as a host that confirms does. Trials are off by default;
        // `TrialDefaultTests` checks that default with `configuration.maxTrialLaunches = nil`.
        configuration.maxTrialLaunches = VersionLifecycle.defaultMaxTrialLaunches
        for version in PackageFixture.versions { origin.put("\(version).zip", self.fixture.bytes(version)) }
    }

    package func agent() -> Agent { Agent(root: root.url, configuration: configuration) }

    package func sync(force: Bool = true, publicKey: String? = nil, network: NetworkKind = .unmetered) async -> SyncReport {
        await agent().sync(app: "mall", manifest: origin.manifestURL, options: SyncOptions(force: force, publicKey: publicKey, network: network))
    }

    /// A manifest offering the full package of `version`.
    package func full(_ version: String, _ extra: [String: Any] = [:]) -> [String: Any] {
        let bytes = fixture.bytes(version)
        let sha = PackageFixture.sha256(bytes)
        var object: [String: Any] = [
            "app": "mall", "version": version, "miniVersion": "1.0.0", "isPatch": false,
            "url": "files/\(version).zip", "size": bytes.count, "sha256": sha, "packageSha256": sha,
            "whitelist": [Self.whitelist], "rollout": 100,
        ]
        object.merge(extra) { $1 }
        return object
    }

    /// A manifest offering a reference-bsdiff patch from `base` to `version`, with the full fallback.
    package func patch(from base: String, to version: String, _ extra: [String: Any] = [:]) throws -> [String: Any] {
        let patch = try fixture.patch(from: base, to: version)
        let name = "\(base)-\(version).bsdiff"
        origin.put(name, patch)
        let full = fixture.bytes(version)
        var object = self.full(version)
        object.merge([
            "isPatch": true, "baseVersion": base, "url": "files/\(name)", "size": patch.count,
            "sha256": PackageFixture.sha256(patch), "fullUrl": "files/\(version).zip", "fullSize": full.count,
            "fullSha256": PackageFixture.sha256(full),
        ]) { $1 }
        object.merge(extra) { $1 }
        return object
    }

    /// Installs `version` with a full sync and checks it worked.
    package func install(_ version: String) async throws {
        origin.setManifest(full(version))
        let report = await sync()
        guard report.result == .updated, report.version?.description == version else {
            throw OfflineAgentError(.install, "setup install of \(version) failed: \(report.error?.description ?? "\(report.result)")")
        }
    }

    package var store: Store { Store(root: root.path) }
    package var active: Version? { store.active("mall")?.version }

    /// The bytes of a file of the active version, read through the resolver.
    package func served(_ path: String) async throws -> [UInt8]? {
        guard case .file(let file) = try await agent().resolve(URL(string: Self.whitelist + path)!, deviceID: "device") else { return nil }
        return FileManager.default.contents(atPath: file.path).map { [UInt8]($0) }
    }

    package func expected(_ version: String, _ path: String) -> [UInt8] {
        [UInt8](FileManager.default.contents(atPath: "\(Repo.fixtures)/sample-app/\(version)/\(path)")!)
    }

    /// True when every file of the active version equals `version`'s fixture.
    package func activeMatches(_ version: String) -> Bool {
        guard let active = store.active("mall"), active.version.description == version else { return false }
        let dir = store.versionDirectory("mall", active.version)
        let source = "\(Repo.fixtures)/sample-app/\(version)"
        guard tree(dir) == tree(source) else { return false }
        return tree(source).allSatisfy { name in
            FileSystem.isDirectory("\(source)/\(name)")
                || FileManager.default.contents(atPath: "\(source)/\(name)") == FileManager.default.contents(atPath: "\(dir)/\(name)")
        }
    }
}
