import OfflineAgent
import OfflinePublish
import AsyncHTTPClient
import Crypto
import Foundation
import Testing

/// Shared helpers of the publish and reference-server tests.
package enum PublishFixtures {
    /// The package root.
    package static var packageRoot: String { Repo.root }

    package static let sampleVersions = ["1.0.0", "1.1.0", "1.2.0", "1.3.0"]

    /// `fixtures/sample-app/<version>`.
    package static func sampleApp(_ version: String) -> String { "\(packageRoot)/fixtures/sample-app/\(version)" }

    /// A fresh directory under the system temp dir; remove it with `cleanUp`.
    package static func temporaryDirectory(_ label: String = "publish") throws -> String {
        let path = NSTemporaryDirectory() + "offline-\(label)-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    package static func cleanUp(_ path: String) { try? FileManager.default.removeItem(atPath: path) }

    /// The publish time `publishSample` records unless told otherwise.
    package static let fixedPublishTime = Date(timeIntervalSince1970: 1_790_000_000)

    /// Publishes sample versions in order into `out` as app `app`.
    @discardableResult
    package static func publishSample(
        _ versions: [String] = sampleVersions, app: String = "sample", to out: String, key: SigningKey? = nil,
        whitelist: [String]? = ["https://h5.example.com/sample/"], now: Date = fixedPublishTime
    ) throws -> [PublishResult] {
        try versions.map { version in
            var options = PublishOptions(
                app: app, version: Version(version)!, sourceDirectory: sampleApp(version), publishDirectory: out,
                whitelist: whitelist, signingKey: key)
            // A fixed publish time: the same input then gives the same bytes (publishedAt, revisions).
            options.now = now
            return try Publisher.publish(options)
        }
    }

    /// Every file under `root` (hidden ones too) by relative path, with its bytes.
    package static func tree(_ root: String) -> [String: Data] {
        var files: [String: Data] = [:]
        guard let walker = FileManager.default.enumerator(atPath: root) else { return files }
        while let relative = walker.nextObject() as? String {
            var isDirectory: ObjCBool = false
            let path = "\(root)/\(relative)"
            if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), !isDirectory.boolValue {
                files[relative] = FileManager.default.contents(atPath: path) ?? Data()
            }
        }
        return files
    }

    package static func sha256(_ data: Data) -> String {
        SHA256.hash(data: data).hex
    }

    package static func sha256(file path: String) -> String? {
        FileManager.default.contents(atPath: path).map(sha256)
    }

    /// Runs a program, returning its exit status, stdout and stderr.
    @discardableResult
    package static func run(_ executable: String, _ arguments: [String]) async throws -> (status: Int32, stdout: String, stderr: String) {
        let result = try await CLI.run(arguments, executable: executable)
        return (result.status, result.stdout, result.stderr)
    }

    /// `gzip -dc`: the decompressed bytes of a gzip file.
    package static func gunzip(_ path: String) async throws -> Data {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/bin/gzip")
        process.arguments = ["-dc", path]
        let out = Pipe()
        process.standardOutput = out
        try process.run()
        // Binary output: read here, on a thread of its own, not through CLI's text result.
        let data = try await LocalHTTP.onThread { out.fileHandleForReading.readAllRetryingInterrupts() }
        await process.exited()
        guard process.terminationStatus == 0 else { throw OfflineAgentError(.publish, "gzip -dc failed", path: path) }
        return data
    }

    /// A built executable of this package (`.build/debug/NAME`), when it exists.
    package static func builtExecutable(_ name: String) -> String? {
        for configuration in ["debug", "release"] {
            let path = "\(packageRoot)/.build/\(configuration)/\(name)"
            if FileManager.default.isExecutableFile(atPath: path) { return path }
        }
        return nil
    }
}
