import OfflineAgent
import Foundation
import OfflineServe
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A store with hand-made versions (fixture files plus extras), no network.
package final class LocalStoreFixture: @unchecked Sendable {
    package init() {}

    package static let whitelist = "https://h5.example.invalid/mall/"
    package let root = TemporaryDirectory("serve")
    package var store: Store { Store(root: root.path) }

    /// Installs `version` of `app` from the fixture app directory `fixture` (when given)
    /// plus `files`, records it and makes it active.
    package func add(
        _ app: String = "mall", version: String, fixture: String? = "1.0.0", files: [String: [UInt8]] = [:],
        whitelist: [String] = [LocalStoreFixture.whitelist], miniVersion: String = "1.0.0", rollout: Int = 100,
        fallback: String? = nil
    ) throws {
        try store.prepare(app)
        let v = Version(version)!
        let dir = store.versionDirectory(app, v)
        if let fixture {
            try FileManager.default.copyItem(atPath: "\(Repo.fixtures)/sample-app/\(fixture)", toPath: dir)
        } else {
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        }
        for (name, content) in files {
            let path = "\(dir)/\(name)"
            try FileManager.default.createDirectory(atPath: FileSystem.parent(of: path), withIntermediateDirectories: true)
            #expect(FileManager.default.createFile(atPath: path, contents: Data(content)))
        }
        let record = InstalledVersion(
            version: v, packageSha256: String(repeating: "0", count: 64), miniVersion: Version(miniVersion)!,
            whitelist: whitelist, rollout: rollout, installedAt: Date(), via: .full, previousVersion: store.active(app)?.version,
            fallback: fallback)
        try store.updateRecord(record, app: app)
        try store.activate(app, v)
    }

    package func directory(_ version: String, app: String = "mall") -> String {
        store.versionDirectory(app, Version(version)!)
    }

    package func start(deviceID: String = "device", allowRemote: Bool = false) async throws -> RunningLocalServer {
        var configuration = LocalServer.Configuration(root: root.path, port: 0, deviceID: deviceID, allowRemote: allowRemote)
        // Bounds on a hang, not speeds: on a loaded machine the other side's close frame, or
        // the origin's 101, can come later than the defaults (5 s, 10 s), and no test here
        // is about those two bounds.
        configuration.webSockets.closeTimeout = .seconds(300)
        configuration.webSockets.handshakeTimeout = .seconds(120)
        return try await LocalServer(configuration: configuration).start()
    }

    package static func fixtureBytes(_ version: String, _ path: String) -> [UInt8] {
        [UInt8](FileManager.default.contents(atPath: "\(Repo.fixtures)/sample-app/\(version)/\(path)")!)
    }
}

/// Deterministic bytes for big-file tests.
package func localRandomBytes(_ count: Int, seed: UInt64) -> [UInt8] {
    var generator = SplitMix64(seed: seed)
    var bytes = [UInt8](repeating: 0, count: count)
    bytes.withUnsafeMutableBytes { raw in
        var i = 0
        while i + 8 <= count {
            raw.storeBytes(of: generator.next(), toByteOffset: i, as: UInt64.self)
            i += 8
        }
        while i < count {
            raw[i] = UInt8(truncatingIfNeeded: generator.next())
            i += 1
        }
    }
    return bytes
}

/// Runs `body` with a started server and stops it afterwards, even on failure.
package func withLocalServer(
    _ fixture: LocalStoreFixture, deviceID: String = "device", allowRemote: Bool = false,
    _ body: (RunningLocalServer) async throws -> Void
) async throws {
    let server = try await fixture.start(deviceID: deviceID, allowRemote: allowRemote)
    do {
        try await body(server)
    } catch {
        await server.stop()
        throw error
    }
    await server.stop()
}
