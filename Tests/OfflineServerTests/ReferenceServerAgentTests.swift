import Foundation
import OfflineServer
import Testing
@testable import OfflineAgent
import TestSupport
import OfflinePublish

/// The agent against the reference server and the static form: both ends of
/// PROTOCOL.md meet over real HTTP.
@Suite("ReferenceServer + Agent")
struct ReferenceServerAgentTests {
    typealias F = PublishFixtures

    @Test("the agent installs full, then patches, then is up to date; signed throughout")
    func agentSyncs() async throws {
        let out = try F.temporaryDirectory("agent-e2e")
        defer { F.cleanUp(out) }
        let key = SigningKey.generate()
        try F.publishSample(["1.0.0", "1.1.0"], to: out, key: key)
        let server = try await ReferenceServer(configuration: .init(directory: out, port: 0, signingKey: key)).start()
        do {
            let options = SyncOptions(force: true, publicKey: key.publicKeyBase64)
            let manifestURL = URL(string: "\(server.baseURL)/manifest")!

            let agent = Agent(root: URL(fileURLWithPath: "\(out)/agent"), configuration: SyncHarness.hangBounds())
            let first = await agent.sync(app: "sample", manifest: manifestURL, options: options)
            #expect(first.result == .updated, "\(String(describing: first.error))")
            #expect(first.version == Version("1.1.0") && first.via == .full)
            try expectInstalled("1.1.0", root: "\(out)/agent")

            try F.publishSample(["1.2.0"], to: out, key: key)
            let second = await agent.sync(app: "sample", manifest: manifestURL, options: options)
            #expect(second.result == .updated, "\(String(describing: second.error))")
            #expect(second.version == Version("1.2.0") && second.via == .patch)
            #expect(second.patchFallbackReason == nil)
            try expectInstalled("1.2.0", root: "\(out)/agent")

            let third = await agent.sync(app: "sample", manifest: manifestURL, options: options)
            #expect(third.result == .upToDate, "\(String(describing: third.error))")
            try expectInstalled("1.2.0", root: "\(out)/agent")

            // The static form on the same host: manifest.json + .sig, gzip full package.
            let staticAgent = Agent(root: URL(fileURLWithPath: "\(out)/agent-static"), configuration: SyncHarness.hangBounds())
            let viaStatic = await staticAgent.sync(
                app: "sample", manifest: URL(string: "\(server.baseURL)/sample/manifest.json")!, options: options)
            #expect(viaStatic.result == .updated, "\(String(describing: viaStatic.error))")
            #expect(viaStatic.version == Version("1.2.0") && viaStatic.via == .full)
            try expectInstalled("1.2.0", root: "\(out)/agent-static")

            // A wrong key: the signature check refuses the manifest.
            let other = SyncOptions(force: true, publicKey: SigningKey.generate().publicKeyBase64)
            let refused = await Agent(root: URL(fileURLWithPath: "\(out)/agent-wrong-key"), configuration: SyncHarness.hangBounds())
                .sync(app: "sample", manifest: manifestURL, options: other)
            #expect(refused.result == .failed)
            #expect(refused.error?.cause == .signatureInvalid, "\(String(describing: refused.error))")
            #expect(Store(root: "\(out)/agent-wrong-key").active("sample") == nil)
        } catch {
            await server.stop()
            throw error
        }
        await server.stop()
    }

    /// The active version of `sample` under `root` is `version`, and its files are the
    /// published source's, byte for byte (no file missing, none extra).
    private func expectInstalled(_ version: String, root: String) throws {
        let store = Store(root: root)
        let active = try #require(store.active("sample"))
        #expect(active.version == Version(version))
        let installed = F.tree(store.versionDirectory("sample", active.version))
        let source = F.tree(F.sampleApp(version))
        #expect(!source.isEmpty)
        #expect(installed.keys.sorted() == source.keys.sorted(), "same files as the published source")
        for (name, bytes) in source { #expect(installed[name] == bytes, "\(name) differs from the published source") }
    }
}
