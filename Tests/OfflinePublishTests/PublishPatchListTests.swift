import Foundation
import Testing
@testable import OfflineAgent
import OfflinePublish
import TestSupport

/// The static `manifest.json` lists the patches to the new version from the last 3
/// published versions, so a device behind a plain static host or CDN downloads its
/// delta instead of the full package.
@Suite("Publish: patches in the static manifest")
struct PublishPatchListTests {
    typealias F = PublishFixtures

    @Test("manifest.json lists a patch from each of the last 3 versions, each naming a file beside it; signed as before")
    func listsPatches() throws {
        let out = try F.temporaryDirectory()
        defer { F.cleanUp(out) }
        let key = SigningKey.generate()
        // 1.0.0 … 1.3.0, then a fifth version: only the last three bases get a patch.
        try F.publishSample(to: out, key: key)
        let source = "\(out)-src"
        try FileManager.default.copyItem(atPath: F.sampleApp("1.3.0"), toPath: source)
        defer { F.cleanUp(source) }
        try Data("1.4.0\n".utf8).write(to: URL(fileURLWithPath: "\(source)/index.html"))
        _ = try Publisher.publish(PublishOptions(
            app: "sample", version: Version("1.4.0")!, sourceDirectory: source, publishDirectory: out,
            whitelist: ["https://h5.example.com/sample/"], signingKey: key))

        let app = "\(out)/sample"
        let body = try Data(contentsOf: URL(fileURLWithPath: "\(app)/manifest.json"))
        let manifest = try Manifest.decode(body)
        #expect(!manifest.isPatch, "the static form still describes the full package at the top")
        #expect(manifest.patches.map(\.baseVersion) == ["1.1.0", "1.2.0", "1.3.0"].map { Version($0)! })
        let package = try #require(FileManager.default.contents(atPath: "\(app)/1.4.0.zip"))
        for patch in manifest.patches {
            #expect(patch.url == "\(patch.baseVersion)-1.4.0.bsdiff")
            let path = "\(app)/\(patch.url)"
            #expect(FileSystem.fileSize(path) == patch.size)
            #expect(F.sha256(file: path) == patch.sha256)
            // Each patch rebuilds the new package from its base, byte for byte.
            let rebuilt = "\(out)/rebuilt-\(patch.baseVersion).zip"
            try Patcher.apply(
                old: URL(fileURLWithPath: "\(app)/\(patch.baseVersion).zip"), patch: URL(fileURLWithPath: path),
                to: URL(fileURLWithPath: rebuilt), expectedSize: Int64(package.count))
            #expect(FileManager.default.contents(atPath: rebuilt) == package)
        }
        let signature = try String(contentsOfFile: "\(app)/manifest.json.sig", encoding: .utf8)
        try ManifestSignature.verify(signature, of: body, with: try ManifestSignature.publicKey(base64: key.publicKeyBase64))
    }

    @Test("--base-url makes the patch URLs absolute too; a first publish lists none")
    func absoluteAndFirst() throws {
        let out = try F.temporaryDirectory()
        defer { F.cleanUp(out) }
        try F.publishSample(["1.0.0"], to: out)
        #expect(try Manifest.decode(Data(contentsOf: URL(fileURLWithPath: "\(out)/sample/manifest.json"))).patches.isEmpty)
        _ = try Publisher.publish(PublishOptions(
            app: "sample", version: Version("1.1.0")!, sourceDirectory: F.sampleApp("1.1.0"), publishDirectory: out,
            baseURL: "https://cdn.example.com/pub/"))
        let manifest = try Manifest.decode(Data(contentsOf: URL(fileURLWithPath: "\(out)/sample/manifest.json")))
        #expect(manifest.patches.map(\.url) == ["https://cdn.example.com/pub/sample/1.0.0-1.1.0.bsdiff"])
    }
}
