import Foundation
import OfflineServer
import Testing
@testable import OfflineAgent
import TestSupport
import OfflinePublish

/// What the reference server tells caches (CDNs, proxies) and static clients: every
/// manifest lists the patches to the latest, and each response carries a
/// `Cache-Control` suited to its file.
@Suite("ReferenceServer: patches list and Cache-Control")
struct ReferenceServerCacheTests {
    typealias F = PublishFixtures

    func withServer(maxAge: Int = 60, _ body: (RunningReferenceServer) async throws -> Void) async throws {
        let out = try F.temporaryDirectory("server-cache")
        defer { F.cleanUp(out) }
        try F.publishSample(to: out)
        let server = try await ReferenceServer(configuration: .init(directory: out, port: 0, manifestMaxAge: maxAge)).start()
        do {
            try await body(server)
        } catch {
            await server.stop()
            throw error
        }
        await server.stop()
    }

    @Test("every manifest lists the patches from the last 3 versions, also when it chose one for the client")
    func listsPatches() async throws {
        try await withServer { server in
            let bases = ["1.0.0", "1.1.0", "1.2.0"].map { Version($0)! }
            for current in ["", "1.0.0", "1.1.0", "1.2.0"] {
                let response = try await PublishHTTP.fetch("\(server.baseURL)/manifest?app=sample&current=\(current)")
                #expect(response.status == 200)
                let manifest = try Manifest.decode(response.body)
                #expect(manifest.patches.map(\.baseVersion) == bases, "current=\(current)")
                #expect(manifest.patches.map(\.url) == bases.map { "sample/\($0)-1.3.0.bsdiff" })
                #expect(manifest.isPatch == !current.isEmpty)
                // Each entry names the file the server hands out under it.
                for patch in manifest.patches {
                    let file = try await PublishHTTP.fetch("\(server.baseURL)/\(patch.url)")
                    #expect(file.status == 200 && PublishFixtures.sha256(file.body) == patch.sha256 && Int64(file.body.count) == patch.size)
                }
            }
            let path = try Manifest.decode(try await PublishHTTP.fetch("\(server.baseURL)/sample/manifest").body)
            #expect(path.patches.map(\.url) == bases.map { "\($0)-1.3.0.bsdiff" })
        }
    }

    @Test("Cache-Control: short for manifests and .sig (on 200 and 304), a year and immutable for packages and patches, no-store for errors",
          arguments: [
            ("/manifest?app=sample&current=1.0.0", "public, max-age=7"),
            ("/sample/manifest?current=", "public, max-age=7"),
            ("/sample/manifest.json", "public, max-age=7"),
            ("/sample/1.3.0.zip", "public, max-age=31536000, immutable"),
            ("/sample/1.3.0.zip.gz", "public, max-age=31536000, immutable"),
            ("/sample/1.2.0-1.3.0.bsdiff", "public, max-age=31536000, immutable"),
            ("/sample/9.9.9.zip", "no-store"),
            ("/manifest?app=nothing", "no-store"),
            ("/sample/state.json", "no-store"),
          ])
    func cacheControl(_ path: String, _ expected: String) async throws {
        try await withServer(maxAge: 7) { server in
            let response = try await PublishHTTP.fetch(server.baseURL + path)
            #expect(response.header("Cache-Control") == expected, "\(response.status)")
            if let etag = response.header("ETag"), response.status == 200 {
                let again = try await PublishHTTP.fetch(server.baseURL + path, headers: [("If-None-Match", etag)])
                #expect(again.status == 304)
                #expect(again.header("Cache-Control") == expected, "a 304 refreshes the cached copy with the same rules")
            }
        }
    }

    @Test("the static .sig is short-lived like its manifest")
    func signatureFile() async throws {
        let out = try F.temporaryDirectory("server-cache-sig")
        defer { F.cleanUp(out) }
        try F.publishSample(["1.0.0"], to: out, key: SigningKey.generate())
        let server = try await ReferenceServer(configuration: .init(directory: out, port: 0, manifestMaxAge: 5)).start()
        let response = try await PublishHTTP.fetch("\(server.baseURL)/sample/manifest.json.sig")
        await server.stop()
        #expect(response.status == 200)
        #expect(response.header("Cache-Control") == "public, max-age=5")
    }
}
