import Foundation
import OfflineServer
import Testing
@testable import OfflineAgent
import TestSupport
import OfflinePublish

@Suite("ReferenceServer")
struct ReferenceServerTests {
    typealias F = PublishFixtures

    /// A publish directory with the four sample versions, served on 127.0.0.1:0.
    struct Served {
        let out: String
        let key: SigningKey
        let server: RunningReferenceServer
        var app: String { "\(out)/sample" }
        func url(_ path: String) -> String { server.baseURL + path }
    }

    func withServer(
        fullCompression: Manifest.Compression = .gzip, _ body: (Served) async throws -> Void
    ) async throws {
        let out = try F.temporaryDirectory("server")
        defer { F.cleanUp(out) }
        let key = SigningKey.generate()
        try F.publishSample(to: out, key: key)
        let server = try await ReferenceServer(configuration: .init(
            directory: out, port: 0, signingKey: key, fullCompression: fullCompression)).start()
        #expect(server.port > 0)
        do {
            try await body(Served(out: out, key: key, server: server))
        } catch {
            await server.stop()
            throw error
        }
        await server.stop()
    }

    /// Fetches and checks a manifest (status, signature), returning it with its URL and response.
    func manifest(_ served: Served, _ url: String) async throws -> (Manifest, URL, PublishHTTP.Response) {
        let response = try await PublishHTTP.fetch(url, headers: [("Accept", "application/json")])
        #expect(response.status == 200)
        #expect(response.header("Content-Type") == "application/json")
        let signature = try #require(response.header(ManifestSignature.header))
        try ManifestSignature.verify(signature, of: response.body, with: try ManifestSignature.publicKey(base64: served.key.publicKeyBase64))
        return (try Manifest.decode(response.body), URL(string: url)!, response)
    }

    /// Downloads what a manifest URL field names, resolved like the agent does.
    func download(_ field: String, against manifestURL: URL) async throws -> Data {
        let url = try #require(URL(string: field, relativeTo: manifestURL)?.absoluteURL)
        let response = try await PublishHTTP.fetch(url.absoluteString)
        #expect(response.status == 200, "\(url)")
        return response.body
    }

    @Test("a patch for each of the last 3 versions, the full package otherwise")
    func choosesPatchOrFull() async throws {
        try await withServer { served in
            // "1.2" is "1.2.0": versions compare numerically.
            for (base, published) in [("1.0.0", "1.0.0"), ("1.1.0", "1.1.0"), ("1.2.0", "1.2.0"), ("1.2", "1.2.0")] {
                let (manifest, url, _) = try await manifest(served, served.url("/manifest?app=sample&current=\(base)"))
                #expect(manifest.isPatch && manifest.baseVersion == Version(base))
                #expect(manifest.version == Version("1.3.0"))
                #expect(manifest.url == "sample/\(published)-1.3.0.bsdiff")
                #expect(manifest.compression == .gzip)
                try manifest.validate(forApp: "sample", installed: Version(base))

                // The patch and its fallback download and check out.
                let patch = try await download(manifest.url, against: url)
                #expect(Int64(patch.count) == manifest.size && F.sha256(patch) == manifest.sha256)
                let old = "\(served.app)/\(published).zip"
                let patchFile = "\(served.out)/dl-\(base).bsdiff", rebuilt = "\(served.out)/rebuilt-\(base).zip"
                try patch.write(to: URL(fileURLWithPath: patchFile))
                try Patcher.apply(old: URL(fileURLWithPath: old), patch: URL(fileURLWithPath: patchFile), to: URL(fileURLWithPath: rebuilt))
                #expect(F.sha256(file: rebuilt) == manifest.packageSha256)

                let full = try await download(try #require(manifest.fullUrl), against: url)
                #expect(Int64(full.count) == manifest.fullSize && F.sha256(full) == manifest.fullSha256)
                let gz = "\(served.out)/full-\(base).gz"
                try full.write(to: URL(fileURLWithPath: gz))
                #expect(F.sha256(try await F.gunzip(gz)) == manifest.packageSha256)
            }
            for current in ["", "0.9.0", "1.3.0", "2.0"] {
                let (manifest, url, _) = try await manifest(served, served.url("/manifest?app=sample&current=\(current)"))
                #expect(!manifest.isPatch && manifest.baseVersion == nil && manifest.fullUrl == nil)
                #expect(manifest.url == "sample/1.3.0.zip.gz" && manifest.compression == .gzip)
                let full = try await download(manifest.url, against: url)
                #expect(F.sha256(full) == manifest.sha256)
            }
            // No `current` at all: the full package too.
            let (plain, _, _) = try await manifest(served, served.url("/manifest?app=sample"))
            #expect(!plain.isPatch)
        }
    }

    @Test("/APP/manifest answers the same, with URLs beside it that resolve to the same files")
    func pathRoute() async throws {
        try await withServer { served in
            let (byQuery, queryURL, _) = try await manifest(served, served.url("/manifest?app=sample&current=1.1.0"))
            let (byPath, pathURL, _) = try await manifest(served, served.url("/sample/manifest?current=1.1.0"))
            #expect(byPath.url == "1.1.0-1.3.0.bsdiff")
            #expect(URL(string: byPath.url, relativeTo: pathURL)!.absoluteString == URL(string: byQuery.url, relativeTo: queryURL)!.absoluteString)
            #expect(byPath.sha256 == byQuery.sha256)
            // The agent appends its parameters after the URL's own.
            let (appended, _, _) = try await manifest(served, served.url("/sample/manifest?app=sample&current=1.1.0"))
            #expect(appended.isPatch)
        }
    }

    @Test("uncompressed full packages when configured: sha256 == packageSha256")
    func uncompressedFull() async throws {
        try await withServer(fullCompression: .none) { served in
            let (full, url, _) = try await manifest(served, served.url("/manifest?app=sample&current="))
            #expect(full.compression == .none && full.url == "sample/1.3.0.zip" && full.sha256 == full.packageSha256)
            #expect(F.sha256(try await download(full.url, against: url)) == full.packageSha256)
            let (patch, _, _) = try await manifest(served, served.url("/manifest?app=sample&current=1.2.0"))
            #expect(patch.fullUrl == "sample/1.3.0.zip" && patch.fullSha256 == patch.packageSha256)
        }
    }

    @Test("ETag round trip: 304 while nothing changes, 200 after a publish while running")
    func etagRoundTrip() async throws {
        try await withServer { served in
            let url = served.url("/manifest?app=sample&current=1.2.0")
            let first = try await PublishHTTP.fetch(url)
            let etag = try #require(first.header("ETag"))
            #expect(etag.hasPrefix("\"") && etag.hasSuffix("\""))
            let again = try await PublishHTTP.fetch(url, headers: [("If-None-Match", etag)])
            #expect(again.status == 304 && again.body.isEmpty && again.header("ETag") == etag)
            #expect(try await PublishHTTP.fetch(url, headers: [("If-None-Match", "W/\(etag)")]).status == 304)
            #expect(try await PublishHTTP.fetch(url, headers: [("If-None-Match", "\"other\"")]).status == 200)
            // Another `current` is another body, another tag.
            #expect(try await PublishHTTP.fetch(served.url("/manifest?app=sample&current=1.1.0")).header("ETag") != etag)

            // Publish 1.4.0 (1.3.0's files plus one) while the server runs.
            let source = "\(served.out)/src-1.4.0"
            try FileManager.default.copyItem(atPath: F.sampleApp("1.3.0"), toPath: source)
            try Data("new in 1.4.0\n".utf8).write(to: URL(fileURLWithPath: "\(source)/NEWS.txt"))
            _ = try Publisher.publish(PublishOptions(
                app: "sample", version: Version("1.4.0")!, sourceDirectory: source, publishDirectory: served.out,
                signingKey: served.key))
            let after = try await PublishHTTP.fetch(url, headers: [("If-None-Match", etag)])
            #expect(after.status == 200 && after.header("ETag") != etag)
            let manifest = try Manifest.decode(after.body)
            #expect(manifest.version == Version("1.4.0") && manifest.isPatch && manifest.baseVersion == Version("1.2.0"))
            // 1.0.0 fell out of the last three.
            let old = try Manifest.decode(try await PublishHTTP.fetch(served.url("/manifest?app=sample&current=1.0.0")).body)
            #expect(!old.isPatch && old.version == Version("1.4.0"))
        }
    }

    @Test("Range resume: 206 with the right bytes, If-Range mismatch sends it all, 416 past the end")
    func rangeRequests() async throws {
        try await withServer { served in
            let url = served.url("/sample/1.3.0.zip")
            let whole = try await PublishHTTP.fetch(url)
            let bytes = try Data(contentsOf: URL(fileURLWithPath: "\(served.app)/1.3.0.zip"))
            #expect(whole.status == 200 && whole.body == bytes)
            #expect(whole.header("Accept-Ranges") == "bytes")
            #expect(whole.header("Content-Type") == "application/zip")
            let etag = try #require(whole.header("ETag"))
            #expect(etag == "\"\(F.sha256(bytes))\"")
            let size = bytes.count

            let tail = try await PublishHTTP.fetch(url, headers: [("Range", "bytes=1000-"), ("If-Range", etag)])
            #expect(tail.status == 206)
            #expect(tail.body == bytes[1000...])
            #expect(tail.header("Content-Range") == "bytes 1000-\(size - 1)/\(size)")

            let middle = try await PublishHTTP.fetch(url, headers: [("Range", "bytes=10-19")])
            #expect(middle.status == 206 && middle.body == bytes[10...19])
            let suffix = try await PublishHTTP.fetch(url, headers: [("Range", "bytes=-5")])
            #expect(suffix.status == 206 && suffix.body == bytes[(size - 5)...])
            let lastModified = try #require(whole.header("Last-Modified"))
            #expect(try await PublishHTTP.fetch(url, headers: [("Range", "bytes=5-"), ("If-Range", lastModified)]).status == 206)

            let changed = try await PublishHTTP.fetch(url, headers: [("Range", "bytes=1000-"), ("If-Range", "\"0000\"")])
            #expect(changed.status == 200 && changed.body == bytes)
            let weak = try await PublishHTTP.fetch(url, headers: [("Range", "bytes=1000-"), ("If-Range", "W/\(etag)")])
            #expect(weak.status == 200 && weak.body == bytes)

            let past = try await PublishHTTP.fetch(url, headers: [("Range", "bytes=\(size)-")])
            #expect(past.status == 416 && past.header("Content-Range") == "bytes */\(size)")
            // Several ranges: the whole file (allowed, and what downloaders cope with).
            #expect(try await PublishHTTP.fetch(url, headers: [("Range", "bytes=0-1,5-6")]).status == 200)

            let head = try await PublishHTTP.fetch(url, method: "HEAD")
            #expect(head.status == 200 && head.body.isEmpty && head.header("Content-Length") == String(size))
        }
    }

    @Test("a published file answers If-Modified-Since as serve does: 304 when not newer, If-None-Match wins")
    func ifModifiedSince() async throws {
        try await withServer { served in
            let url = served.url("/sample/1.3.0.zip")
            let whole = try await PublishHTTP.fetch(url)
            let lastModified = try #require(whole.header("Last-Modified"))
            let notModified = try await PublishHTTP.fetch(url, headers: [("If-Modified-Since", lastModified)])
            #expect(notModified.status == 304 && notModified.body.isEmpty && notModified.header("ETag") == whole.header("ETag"))
            #expect(try await PublishHTTP.fetch(url, headers: [("If-Modified-Since", "Thu, 01 Jan 1970 00:00:00 GMT")]).status == 200)
            // If-None-Match that misses: the date is not looked at (RFC 9110 §13.2.2).
            let missed = try await PublishHTTP.fetch(url, headers: [("If-None-Match", "\"other\""), ("If-Modified-Since", lastModified)])
            #expect(missed.status == 200)
            #expect(try await PublishHTTP.fetch(url, headers: [("If-Modified-Since", "not a date")]).status == 200)
        }
    }

    @Test("signature: verifies with the public key, fails on a flipped byte; the static .sig matches")
    func signatures() async throws {
        try await withServer { served in
            let publicKey = try ManifestSignature.publicKey(base64: served.key.publicKeyBase64)
            let response = try await PublishHTTP.fetch(served.url("/manifest?app=sample&current=1.1.0"))
            let signature = try #require(response.header("X-Offline-Signature"))
            try ManifestSignature.verify(signature, of: response.body, with: publicKey)
            for index in [0, response.body.count / 2, response.body.count - 1] {
                var flipped = response.body
                flipped[flipped.startIndex + index] ^= 0x20
                #expect(throws: OfflineAgentError.self) { try ManifestSignature.verify(signature, of: flipped, with: publicKey) }
            }
            // The static form, fetched from the same server as a static host would serve it.
            let staticBody = try await PublishHTTP.fetch(served.url("/sample/manifest.json"))
            let staticSig = try await PublishHTTP.fetch(served.url("/sample/manifest.json.sig"))
            #expect(staticBody.status == 200 && staticSig.status == 200)
            try ManifestSignature.verify(String(decoding: staticSig.body, as: UTF8.self), of: staticBody.body, with: publicKey)
            #expect(staticBody.body == FileManager.default.contents(atPath: "\(served.app)/manifest.json"))
            let manifest = try Manifest.decode(staticBody.body)
            let gz = try await download(manifest.url, against: URL(string: served.url("/sample/manifest.json"))!)
            #expect(F.sha256(gz) == manifest.sha256)
        }
    }

    @Test("errors: 400 for bad parameters, 404 for unknown apps and files, 405 for other methods")
    func errors() async throws {
        try await withServer { served in
            let cases: [(String, Int)] = [
                ("/manifest", 400),
                ("/manifest?current=1.0.0", 400),
                ("/manifest?app=Sample", 400),
                ("/manifest?app=sample&current=1.x", 400),
                ("/manifest?app=sample&current=-1", 400),
                ("/manifest?app=sample&current=1..0", 400),
                ("/manifest?app=nosuchapp", 404),
                ("/nosuchapp/manifest", 404),
                ("/sample/manifest?app=other", 400),
                ("/sample/state.json", 404),
                ("/sample/9.9.9.zip", 404),
                ("/sample/..%2Fetc%2Fpasswd", 404),
                ("/sample/1.0.0.zip.tmp", 404),
                ("/", 404),
                ("/a/b/c", 404),
            ]
            for (path, status) in cases {
                let response = try await PublishHTTP.fetch(served.url(path))
                #expect(response.status == status, "\(path)")
            }
            #expect(try await PublishHTTP.fetch(served.url("/manifest?app=sample"), method: "POST").status == 405)
        }
    }

    @Test("offline-server prints the port it bound with --port 0 and serves")
    func executable() async throws {
        guard let binary = F.builtExecutable("offline-server") else {
            Issue.record("offline-server is not built (swift build --build-tests builds it)")
            return
        }
        let out = try F.temporaryDirectory("server-exe")
        defer { F.cleanUp(out) }
        try F.publishSample(["1.0.0", "1.1.0"], to: out)
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = ["--dir", out, "--port", "0"]
        let stdout = Pipe()
        process.standardOutput = stdout
        process.standardError = FileHandle.nullDevice
        try process.run()
        defer { if process.isRunning { process.terminate() } }
        // The first line, read without waiting for the pipe to close (on a thread of its own).
        let line = try await LocalHTTP.onThread { () -> Data in
            var line = Data()
            while line.last != UInt8(ascii: "\n") {
                let byte = stdout.fileHandleForReading.readSomeRetryingInterrupts(limit: 1)
                if byte.isEmpty { break }
                line += byte
            }
            return line
        }
        let text = String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(text.hasPrefix("listening on 127.0.0.1:"))
        let port = try #require(Int(text.split(separator: ":").last ?? ""))
        let response = try await PublishHTTP.fetch("http://127.0.0.1:\(port)/manifest?app=sample&current=1.0.0")
        #expect(response.status == 200)
        #expect(try Manifest.decode(response.body).isPatch)
        process.terminate()  // SIGTERM: graceful shutdown
        await process.exited()
        #expect(process.terminationReason == .exit)
    }
}
