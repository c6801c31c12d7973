import Crypto
import Foundation
import Synchronization
import OfflineAgent

/// Real packages of the fixture app: stored zips made by Info-ZIP from
/// `fixtures/sample-app/<version>`, and patches between them made by the reference `bsdiff`.
package final class PackageFixture: @unchecked Sendable {
    package let directory = TemporaryDirectory("packages")
    package static let versions = ["1.0.0", "1.1.0", "1.2.0", "1.3.0"]

    package init() throws {
        for version in Self.versions {
            let source = "\(Repo.fixtures)/sample-app/\(version)"
            let files = tree(source).filter { !FileSystem.isDirectory("\(source)/\($0)") }
            let process = ChildProcess()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            // Stored, sorted, no extra attributes: patches between them stay small.
            process.arguments = ["zip", "-q", "-0", "-X", "-D", package(version)] + files
            process.currentDirectoryURL = URL(fileURLWithPath: source)
            try process.run()
            process.waitUntilExit()  // blocking: zip -0 of a 70 KB fixture version, a moment
            precondition(process.terminationStatus == 0, "zip failed")
        }
    }

    package func package(_ version: String) -> String { directory.file("\(version).zip") }
    package func bytes(_ version: String) -> [UInt8] { [UInt8](FileManager.default.contents(atPath: package(version))!) }

    /// A reference-bsdiff patch from one version's package to another's.
    package func patch(from old: String, to new: String) throws -> [UInt8] {
        let path = directory.file("\(old)-\(new).bsdiff")
        if !FileManager.default.fileExists(atPath: path) {
            let result = try runOnThisThread("bsdiff", [package(old), package(new), path])  // blocking: two 70 KB fixture zips, once, a moment
            precondition(result.status == 0, "bsdiff failed: \(result.stderr)")
        }
        return [UInt8](FileManager.default.contents(atPath: path)!)
    }

    package static func sha256(_ bytes: [UInt8]) -> String { SHA256.hash(data: bytes).hex }

    package static func gzip(_ bytes: [UInt8]) throws -> [UInt8] {
        let scratch = TemporaryDirectory("gz")
        try Data(bytes).write(to: URL(fileURLWithPath: scratch.file("f")))
        let result = try runOnThisThread("gzip", ["-n", "-9", scratch.file("f")])  // blocking: a 70 KB fixture zip, a moment
        precondition(result.status == 0)
        return [UInt8](FileManager.default.contents(atPath: scratch.file("f.gz"))!)
    }
}

/// A package origin on a ScriptedServer: a manifest per request and files with Range
/// support, plus knobs to make either misbehave.
package final class Origin: @unchecked Sendable {
    private struct State {
        var files: [String: [UInt8]] = [:]
        var manifestBody: @Sendable (ScriptedServer.Request) -> ScriptedServer.Reply = { _ in .status(404) }
        var fileOverride: [String: @Sendable (ScriptedServer.Request, [UInt8]) -> ScriptedServer.Reply] = [:]
    }
    private let state = Mutex(State())
    private(set) var server: ScriptedServer!

    package var manifestURL: URL { URL(string: "\(server.baseURL)/manifest")! }
    package func fileURL(_ name: String) -> String { "\(server.baseURL)/files/\(name)" }

    package init() throws {
        server = try ScriptedServer { [unowned self] request in self.answer(request) }
    }

    deinit { server.stop() }

    package func put(_ name: String, _ bytes: [UInt8]) { state.withLock { $0.files[name] = bytes } }

    /// Serves this JSON object as the manifest (encoded exactly as given).
    package func setManifest(_ object: [String: Any], headers: [(String, String)] = []) {
        let body = try! JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
        setManifest(raw: [UInt8](body), headers: headers)
    }

    package func setManifest(raw: [UInt8], headers: [(String, String)] = []) {
        state.withLock { $0.manifestBody = { _ in .ok(raw, headers: headers) } }
    }

    package func setManifestReply(_ reply: @escaping @Sendable (ScriptedServer.Request) -> ScriptedServer.Reply) {
        state.withLock { $0.manifestBody = reply }
    }

    /// Replaces how one file is served (the file's true bytes are passed in).
    package func override(_ name: String, _ reply: @escaping @Sendable (ScriptedServer.Request, [UInt8]) -> ScriptedServer.Reply) {
        state.withLock { $0.fileOverride[name] = reply }
    }

    package func clearOverrides() { state.withLock { $0.fileOverride = [:] } }

    /// Serves a file correctly but slowly, in small pieces, so a sync stays busy a while.
    package func slow(_ name: String, chunk: Int, pause: Double = 0.02) {
        override(name) { request, bytes in
            var reply = Origin.serve(bytes, request: request)
            reply.ending = .drip(chunk: chunk, pause: pause)
            return reply
        }
    }

    /// Waits until a request for `path` arrived (at most 5 minutes: a request that never
    /// comes, not a slow one), sleeping with `Task.sleep`: no cooperative thread is held.
    package func waitForRequest(_ path: String) async {
        for _ in 0..<15_000 where requests(for: path).isEmpty { try? await Task.sleep(for: .milliseconds(20)) }
    }

    package var requests: [ScriptedServer.Request] { server.requests }
    package func requests(for path: String) -> [ScriptedServer.Request] { server.requests.filter { $0.path == path } }

    private func answer(_ request: ScriptedServer.Request) -> ScriptedServer.Reply {
        let (manifest, files, overrides) = state.withLock { ($0.manifestBody, $0.files, $0.fileOverride) }
        if request.path == "/manifest" { return manifest(request) }
        guard request.path.hasPrefix("/files/") else { return .status(404) }
        let name = String(request.path.dropFirst("/files/".count))
        guard let bytes = files[name] else { return .status(404) }
        if let override = overrides[name] { return override(request, bytes) }
        return Self.serve(bytes, request: request)
    }

    /// A correct static file answer: ETag, Range → 206, If-Range.
    package static func serve(_ bytes: [UInt8], request: ScriptedServer.Request, etag: String? = nil) -> ScriptedServer.Reply {
        let tag = etag ?? "\"\(PackageFixture.sha256(bytes).prefix(16))\""
        if let range = request.header("Range"), range.hasPrefix("bytes="), request.header("If-Range").map({ $0 == tag }) ?? true,
           let start = Int(range.dropFirst(6).split(separator: "-").first ?? "") {
            guard start < bytes.count else {
                return ScriptedServer.Reply(status: 416, headers: [("Content-Range", "bytes */\(bytes.count)")])
            }
            return ScriptedServer.Reply(
                status: 206, headers: [("ETag", tag), ("Content-Range", "bytes \(start)-\(bytes.count - 1)/\(bytes.count)")],
                body: Array(bytes[start...]))
        }
        return .ok(bytes, headers: [("ETag", tag)])
    }
}
