import Foundation
import Testing
@testable import OfflineAgent
import TestSupport
@testable import OfflinePublish

@Suite("Publish")
struct PublishTests {
    typealias F = PublishFixtures

    @Test("publishes packages, gzips, patches from the last 3 versions and state")
    func publishesAllFiles() async throws {
        let out = try F.temporaryDirectory()
        defer { F.cleanUp(out) }
        let results = try F.publishSample(to: out)

        let expectedBases: [[String]] = [[], ["1.0.0"], ["1.0.0", "1.1.0"], ["1.0.0", "1.1.0", "1.2.0"]]
        for (result, bases) in zip(results, expectedBases) {
            #expect(result.patches.map(\.from.description) == bases)
        }
        let app = "\(out)/sample"
        let state = try #require(try PublishState.load(appDirectory: app))
        #expect(state.latest == Version("1.3.0"))
        #expect(state.versions.map(\.version.description) == F.sampleVersions)
        #expect(state.miniVersion == Version("1.0.0"))  // kept from the first publish
        #expect(state.whitelist == ["https://h5.example.com/sample/"])
        #expect(state.rollout == 100 && state.networkType == .any && state.expires == nil)

        for release in state.versions {
            let zip = "\(app)/\(release.packageFile)"
            #expect(F.sha256(file: zip) == release.sha256)
            #expect(FileSystem.fileSize(zip) == release.size)
            #expect(F.sha256(file: "\(app)/\(release.gzipFile)") == release.gzipSha256)
            #expect(F.sha256(try await F.gunzip("\(app)/\(release.gzipFile)")) == release.sha256)
        }
        for patch in state.patches {
            #expect(F.sha256(file: "\(app)/\(patch.file)") == patch.sha256)
        }
        // No staging leftovers.
        #expect(try FileManager.default.contentsOfDirectory(atPath: app).filter { $0.hasPrefix(".") }.isEmpty)
        // The app directory and its empty lock file (PublishLock), nothing else.
        #expect(try FileManager.default.contentsOfDirectory(atPath: out).sorted() == [".sample.lock", "sample"])
        #expect(FileManager.default.contents(atPath: "\(out)/.sample.lock") == Data())
    }

    @Test("the zip holds exactly the source files, stored, sorted, with fixed timestamps")
    func zipMatchesSource() async throws {
        let out = try F.temporaryDirectory()
        defer { F.cleanUp(out) }
        try F.publishSample(["1.2.0"], to: out)
        let zip = "\(out)/sample/1.2.0.zip"

        // Extracted by the agent's own hardened extractor (libzip, consistency checks on).
        let extracted = "\(out)/extracted"
        try ZipExtractor.extract(archive: URL(fileURLWithPath: zip), to: URL(fileURLWithPath: extracted), limits: ExtractionLimits(), durable: false)
        #expect(F.tree(extracted) == F.tree(F.sampleApp("1.2.0")))

        // Info-ZIP's listing: all stored, names in byte order, 1980-01-01 00:00.
        let listing = try await F.run("/usr/bin/unzip", ["-Z", "-l", zip])
        #expect(listing.status == 0)
        let rows = listing.stdout.split(separator: "\n").filter { $0.hasPrefix("-rw-r--r--") }
        #expect(rows.count == F.tree(F.sampleApp("1.2.0")).count)
        #expect(rows.allSatisfy { $0.contains(" stor ") && $0.contains("80-Jan-01 00:00") })
        let names = rows.map { String($0.split(separator: " ").last!) }
        #expect(names == names.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) })
        #expect(try await F.run("/usr/bin/unzip", ["-tq", zip]).status == 0)
    }

    @Test("the static manifest describes the gzip full package, relative to itself, signed")
    func staticManifest() throws {
        let out = try F.temporaryDirectory()
        defer { F.cleanUp(out) }
        let key = SigningKey.generate()
        try F.publishSample(["1.0.0", "1.1.0"], to: out, key: key)
        let app = "\(out)/sample"
        let body = try Data(contentsOf: URL(fileURLWithPath: "\(app)/manifest.json"))
        let manifest = try Manifest.decode(body)
        #expect(manifest.app == "sample" && manifest.version == Version("1.1.0"))
        #expect(!manifest.isPatch && manifest.compression == .gzip)
        #expect(manifest.url == "1.1.0.zip.gz")
        #expect(manifest.size == FileSystem.fileSize("\(app)/1.1.0.zip.gz"))
        #expect(manifest.sha256 == F.sha256(file: "\(app)/1.1.0.zip.gz"))
        #expect(manifest.packageSha256 == F.sha256(file: "\(app)/1.1.0.zip"))
        #expect(manifest.whitelist == ["https://h5.example.com/sample/"])
        let resolved = URL(string: manifest.url, relativeTo: URL(string: "https://cdn.example.com/pub/sample/manifest.json"))!
        #expect(resolved.absoluteString == "https://cdn.example.com/pub/sample/1.1.0.zip.gz")

        let signature = try String(contentsOfFile: "\(app)/manifest.json.sig", encoding: .utf8)
        let publicKey = try ManifestSignature.publicKey(base64: key.publicKeyBase64)
        try ManifestSignature.verify(signature, of: body, with: publicKey)
        var flipped = body
        flipped[flipped.startIndex + 10] ^= 0x01
        #expect(throws: OfflineAgentError.self) { try ManifestSignature.verify(signature, of: flipped, with: publicKey) }
    }

    @Test("--base-url makes absolute URLs; an unsigned publish drops a stale signature")
    func baseURLAndUnsigned() throws {
        let out = try F.temporaryDirectory()
        defer { F.cleanUp(out) }
        try F.publishSample(["1.0.0"], to: out, key: .generate())
        #expect(FileManager.default.fileExists(atPath: "\(out)/sample/manifest.json.sig"))
        _ = try Publisher.publish(PublishOptions(
            app: "sample", version: Version("1.1.0")!, sourceDirectory: F.sampleApp("1.1.0"), publishDirectory: out,
            rollout: 30, networkType: .wifi, expires: .at(Date(timeIntervalSince1970: 1_900_000_000)),
            baseURL: "https://cdn.example.com/h5/"))
        let manifest = try Manifest.decode(try Data(contentsOf: URL(fileURLWithPath: "\(out)/sample/manifest.json")))
        #expect(manifest.url == "https://cdn.example.com/h5/sample/1.1.0.zip.gz")
        #expect(manifest.rollout == 30 && manifest.networkType == .wifi)
        #expect(manifest.expires == Date(timeIntervalSince1970: 1_900_000_000))
        #expect(!FileManager.default.fileExists(atPath: "\(out)/sample/manifest.json.sig"))
    }

    @Test("publishing the same input twice gives identical bytes")
    func deterministic() throws {
        let first = try F.temporaryDirectory(), second = try F.temporaryDirectory()
        defer { F.cleanUp(first); F.cleanUp(second) }
        let key = SigningKey.generate()
        try F.publishSample(to: first, key: key)
        try F.publishSample(to: second, key: key)
        let a = F.tree(first), b = F.tree(second)
        // zips + gzips, patches 1+2+3, manifest + sig + state, the app's and the repository's
        // lock files; then the TUF repository: a
        // hash-prefixed link for each package and patch and each of the 4 manifests, and
        // metadata/ (1.root.json, N.targets.json and N.snapshot.json per publish, timestamp.json).
        func hashPrefixed(_ path: String) -> Bool { (path as NSString).lastPathComponent.split(separator: ".").first?.count == 64 }
        #expect(a.keys.filter { !$0.hasPrefix("metadata/") && !hashPrefixed($0) }.count == 4 * 2 + 6 + 3 + 2)
        #expect(a.keys.filter(hashPrefixed).count == 4 * 2 + 6 + 4)
        #expect(a.keys.filter { $0.hasPrefix("metadata/") }.count == 1 + 4 * 2 + 1)
        #expect(a == b)
    }

    @Test("patches apply with Debian's bspatch and with Patcher to the same package")
    func patchesApply() async throws {
        let out = try F.temporaryDirectory()
        defer { F.cleanUp(out) }
        try F.publishSample(to: out)
        let app = "\(out)/sample"
        let state = try #require(try PublishState.load(appDirectory: app))
        let target = try Data(contentsOf: URL(fileURLWithPath: "\(app)/1.3.0.zip"))
        #expect(state.patches.count == 3)
        for patch in state.patches {
            let old = "\(app)/\(patch.from).zip", file = "\(app)/\(patch.file)"
            let viaDebian = "\(out)/debian-\(patch.from)", viaPatcher = "\(out)/patcher-\(patch.from)"
            #expect(try await F.run("/usr/bin/bspatch", [old, viaDebian, file]).status == 0)
            try Patcher.apply(old: URL(fileURLWithPath: old), patch: URL(fileURLWithPath: file), to: URL(fileURLWithPath: viaPatcher))
            #expect(FileManager.default.contents(atPath: viaDebian) == target)
            #expect(FileManager.default.contents(atPath: viaPatcher) == target)
            // Stored zips patch well: each patch is a small fraction of the package.
            #expect(patch.size * 10 < Int64(target.count))
        }
    }

    // MARK: Refusals

    @Test("a version not greater than the latest is refused and changes nothing",
          arguments: ["1.1.0", "1.1", "1.0.9", "0.1"])
    func refusesOldVersion(_ version: String) throws {
        let out = try F.temporaryDirectory()
        defer { F.cleanUp(out) }
        try F.publishSample(["1.0.0", "1.1.0"], to: out)
        let before = F.tree(out)
        let error = try #require(throws: PublishError.self) {
            try Publisher.publish(PublishOptions(
                app: "sample", version: Version(version)!, sourceDirectory: F.sampleApp("1.2.0"), publishDirectory: out))
        }
        #expect(error.code == .publish)
        #expect(error.reason.contains("not greater than the latest published 1.1.0"))
        #expect(F.tree(out) == before)
    }

    @Test("a missing or empty source, a bad app name or settings are refused before anything is written")
    func refusesBadArguments() throws {
        let out = try F.temporaryDirectory()
        defer { F.cleanUp(out) }
        let target = "\(out)/pub"
        let empty = "\(out)/empty"
        try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: true)
        func attempt(_ edit: (inout PublishOptions) -> Void) -> PublishError? {
            var options = PublishOptions(
                app: "sample", version: Version("1.0.0")!, sourceDirectory: F.sampleApp("1.0.0"), publishDirectory: target)
            edit(&options)
            do {
                _ = try Publisher.publish(options)
                return nil
            } catch {
                return error as? PublishError
            }
        }
        #expect(attempt { $0.sourceDirectory = "\(out)/missing" }?.code == .usage)
        #expect(attempt { $0.sourceDirectory = "\(F.sampleApp("1.0.0"))/index.html" }?.code == .usage)
        #expect(attempt { $0.sourceDirectory = empty }?.reason.contains("no files") == true)
        #expect(attempt { $0.app = "Bad/Name" }?.code == .usage)
        #expect(attempt { $0.rollout = 101 }?.code == .usage)
        #expect(attempt { $0.miniVersion = Version("2.0") }?.code == .usage)
        #expect(attempt { $0.whitelist = ["h5.example.com/x"] }?.code == .usage)
        #expect(attempt { $0.baseURL = "ftp://example.com" }?.code == .usage)
        #expect(!FileManager.default.fileExists(atPath: target))
    }

    @Test("a symlink in the source is refused, not followed")
    func refusesSymlinks() throws {
        let out = try F.temporaryDirectory()
        defer { F.cleanUp(out) }
        let source = "\(out)/src"
        try FileManager.default.createDirectory(atPath: source, withIntermediateDirectories: true)
        try Data("<html></html>".utf8).write(to: URL(fileURLWithPath: "\(source)/index.html"))
        try FileManager.default.createSymbolicLink(atPath: "\(source)/passwd", withDestinationPath: "/etc/passwd")
        let error = try #require(throws: PublishError.self) {
            try Publisher.publish(PublishOptions(
                app: "linky", version: Version("1")!, sourceDirectory: source, publishDirectory: "\(out)/pub"))
        }
        #expect(error.reason.contains("symbolic link"))
        #expect(!FileManager.default.fileExists(atPath: "\(out)/pub"))
    }

    @Test("a publish directory that cannot be created is a clear error and leaves nothing behind")
    func unwritablePublishDirectory() throws {
        // Tests run as root, which ignores permission bits: a path under a regular
        // file fails for everyone (ENOTDIR).
        let out = try F.temporaryDirectory()
        defer { F.cleanUp(out) }
        let file = "\(out)/a-file"
        try Data("x".utf8).write(to: URL(fileURLWithPath: file))
        for target in ["\(file)/pub", file] {
            let error = try #require(throws: PublishError.self) {
                try Publisher.publish(PublishOptions(
                    app: "sample", version: Version("1.0.0")!, sourceDirectory: F.sampleApp("1.0.0"), publishDirectory: target))
            }
            #expect(error.code == .publish)
            #expect(error.description.contains("publish directory"))
        }
        #expect(F.tree(out) == ["a-file": Data("x".utf8)])
    }

    @Test("a failure while moving files in is rolled back: the publish directory is unchanged")
    func rollsBackPartialMove() throws {
        let out = try F.temporaryDirectory()
        defer { F.cleanUp(out) }
        // One key throughout: another would be refused before anything moves (the TUF root names this one).
        let key = SigningKey.generate()
        try F.publishSample(["1.0.0", "1.1.0"], to: out, key: key)
        // Sabotage: manifest.json replaced by a directory, so it can be neither kept
        // for rollback nor renamed over — after the packages and patches moved in.
        let manifest = "\(out)/sample/manifest.json"
        try FileManager.default.removeItem(atPath: manifest)
        try FileManager.default.createDirectory(atPath: manifest, withIntermediateDirectories: false)
        try Data("keep".utf8).write(to: URL(fileURLWithPath: "\(manifest)/inside"))
        let before = F.tree(out)
        let names = try FileManager.default.contentsOfDirectory(atPath: "\(out)/sample").sorted()

        let error = try #require(throws: PublishError.self) { try F.publishSample(["1.2.0"], to: out, key: key) }
        #expect(error.path?.hasSuffix("sample/manifest.json") == true, "failed at \(error)")
        #expect(F.tree(out) == before)
        #expect(try FileManager.default.contentsOfDirectory(atPath: "\(out)/sample").sorted() == names)
    }

    // MARK: Command line

    @Test("keygen writes a 0600 key and its .pub; publish signs and refuses bad versions with status 64")
    func commandLine() async throws {
        guard let publisher = F.builtExecutable("offline-publish") else {
            Issue.record("offline-publish is not built (swift build --build-tests builds it)")
            return
        }
        let out = try F.temporaryDirectory("cli")
        defer { F.cleanUp(out) }
        let keygen = try await F.run(publisher, ["keygen", "--out", "\(out)/key"])
        #expect(keygen.status == 0)
        let printed = keygen.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let key = try SigningKey(contentsOfFile: "\(out)/key")
        #expect(printed == key.publicKeyBase64)
        #expect(try String(contentsOfFile: "\(out)/key.pub", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines) == printed)
        let mode = try FileManager.default.attributesOfItem(atPath: "\(out)/key")[.posixPermissions] as? Int
        #expect(mode == 0o600)
        #expect(try await F.run(publisher, ["keygen", "--out", "\(out)/key"]).status == 64)  // never overwrites silently

        let publish = ["publish", "--app", "sample", "--source", F.sampleApp("1.0.0"), "--out", "\(out)/pub"]
        let ok = try await F.run(publisher, publish + ["--version", "1.0.0", "--key", "\(out)/key", "--whitelist", "https://h5.example.com/a/",
                                             "--whitelist", "https://h5.example.com/b/", "--expires", "2030-01-01T00:00:00Z"])
        #expect(ok.status == 0, "\(ok.stderr)")
        let body = try Data(contentsOf: URL(fileURLWithPath: "\(out)/pub/sample/manifest.json"))
        let signature = try String(contentsOfFile: "\(out)/pub/sample/manifest.json.sig", encoding: .utf8)
        try ManifestSignature.verify(signature, of: body, with: try ManifestSignature.publicKey(base64: printed))
        let manifest = try Manifest.decode(body)
        #expect(manifest.whitelist == ["https://h5.example.com/a/", "https://h5.example.com/b/"])
        #expect(manifest.expires.map(RFC3339.string(from:)) == "2030-01-01T00:00:00Z")

        for bad in ["1.x", "1..0", "-1", "v2", "1.0.0.0.0.0.0.0.0", "1234567890"] {
            let refused = try await F.run(publisher, publish + ["--version=\(bad)"])
            #expect(refused.status == 64, "\(bad): \(refused.stderr)")
            #expect(refused.stderr.contains("invalid version"))
            #expect(refused.stderr.contains("dotted decimal numbers, 1 to 8 components"), "the format is named: \(refused.stderr)")
        }
        let same = try await F.run(publisher, publish + ["--version", "1.0", "--unsigned"])
        #expect(same.status == 1 && same.stderr.contains("not greater than the latest published 1.0.0"))
        #expect(try await F.run(publisher, publish + ["--version", "2", "--network-type", "5g"]).status == 64)
        #expect(try await F.run(publisher, publish + ["--version", "2", "--expires", "tomorrow"]).status == 64)
    }
}
