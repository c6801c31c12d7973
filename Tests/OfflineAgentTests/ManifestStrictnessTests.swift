import Foundation
import Testing
@testable import OfflineAgent
import TestSupport
import OfflinePublish

/// Protocol edges answered strictly: one signed manifest body means one thing to
/// every parser (no duplicated keys, none of the leniencies parsers disagree on),
/// every field error names the field and its rule, and `publish` refuses an expiry
/// no device would accept.
@Suite("Manifest strictness")
struct ManifestStrictnessTests {
    static let hash = String(repeating: "a", count: 64)

    /// The fields of a valid full-package manifest, in order, as raw JSON values.
    static let fields: [(String, String)] = [
        ("app", "\"mall\""), ("version", "\"1.1.0\""), ("miniVersion", "\"1.0.0\""), ("isPatch", "false"),
        ("url", "\"files/1.1.0.zip\""), ("size", "100"), ("sha256", "\"\(hash)\""), ("packageSha256", "\"\(hash)\""),
        ("whitelist", "[\"https://h5.example.com/mall/\"]"), ("rollout", "100"),
    ]

    /// A manifest body: `changes` replace (or with nil remove, or add) fields by raw JSON
    /// value; `append` goes verbatim before the closing brace.
    static func body(_ changes: [String: String?] = [:], append: String = "") -> [UInt8] {
        var members = fields.compactMap { key, value -> String? in
            guard let change = changes[key] else { return "\"\(key)\":\(value)" }
            return change.map { "\"\(key)\":\($0)" }
        }
        for (key, change) in changes.sorted(by: { $0.key < $1.key }) where !fields.contains(where: { $0.0 == key }) {
            if let change { members.append("\"\(key)\":\(change)") }
        }
        return Array(("{" + members.joined(separator: ",") + append + "}").utf8)
    }

    struct Case: CustomTestStringConvertible, Sendable {
        var label: String
        /// The exact reason, or its start when it ends with a byte offset.
        var reason: String
        var prefixOnly = false
        var body: @Sendable () -> [UInt8]
        var testDescription: String { label }
    }

    static func duplicate(_ label: String, key: String, append: String) -> Case {
        Case(label: label, reason: "invalid manifest JSON: duplicated key '\(key)' at byte ", prefixOnly: true) { body(append: append) }
    }

    static let duplicates: [Case] = [
        duplicate("size twice, different values", key: "size", append: ",\"size\":5"),
        duplicate("app twice, same value", key: "app", append: ",\"app\":\"mall\""),
        duplicate("size and its escaped spelling", key: "size", append: ",\"\\u0073ize\":100"),
        duplicate("whitelist twice", key: "whitelist", append: ",\"whitelist\":[]"),
        duplicate("an ignored field twice", key: "status", append: ",\"status\":0,\"status\":0"),
        duplicate("depth 2: inside an unknown object", key: "a", append: ",\"x\":{\"a\":1,\"a\":2}"),
        duplicate("depth 3: in an object inside an array", key: "k", append: ",\"x\":[{\"k\":1},{\"k\":1,\"k\":1}]"),
        duplicate("depth 6", key: "deep", append: ",\"x\":{\"y\":{\"z\":[{\"w\":{\"deep\":1,\"deep\":1}}]}}"),
    ]

    static let leniencies: [Case] = [
        Case(label: "nesting deeper than 32", reason: "invalid manifest JSON: nesting deeper than 32 at byte ", prefixOnly: true) {
            body(append: ",\"x\":" + String(repeating: "[", count: 200) + String(repeating: "]", count: 200))
        },
        Case(label: "lone surrogate escape", reason: "invalid manifest JSON: lone surrogate in a string at byte ", prefixOnly: true) {
            body(["url": "\"files/\\ud800.zip\""])
        },
        Case(label: "invalid UTF-8 in a string", reason: "invalid manifest JSON: string is not valid UTF-8 at byte ", prefixOnly: true) {
            var bytes = body()
            let index = bytes.firstRange(of: Array("files/".utf8))!.lowerBound  // inside the url string
            bytes[index] = 0xFF
            return bytes
        },
        Case(label: "byte-order mark", reason: "invalid manifest JSON: unexpected character at byte 0") { [0xEF, 0xBB, 0xBF] + body() },
        Case(label: "a second value after the object", reason: "invalid manifest JSON: unexpected data after the JSON value at byte ", prefixOnly: true) {
            body() + Array("{}".utf8)
        },
        Case(label: "number with a leading zero", reason: "invalid manifest JSON: number with a leading zero at byte ", prefixOnly: true) {
            body(["size": "0100"])
        },
        Case(label: "raw tab inside a string", reason: "invalid manifest JSON: control character in a string at byte ", prefixOnly: true) {
            body(["url": "\"files/1.1.0\t.zip\""])
        },
        Case(label: "an array, not an object", reason: "invalid manifest: the body must be a JSON object") { Array("[1]".utf8) },
    ]

    static let fieldRules: [Case] = [
        Case(label: "rollout 101", reason: "rollout must be an integer 0…100") { body(["rollout": "101"]) },
        Case(label: "rollout as a string", reason: "rollout must be an integer 0…100") { body(["rollout": "\"50\""]) },
        Case(label: "rollout 50.5", reason: "rollout must be an integer 0…100") { body(["rollout": "50.5"]) },
        Case(label: "epoch -1", reason: "epoch must be an integer 0…999999999") { body(["epoch": "-1"]) },
        Case(label: "epoch 1.0", reason: "epoch must be an integer 0…999999999") { body(["epoch": "1.0"]) },
        Case(label: "epoch 1e3", reason: "epoch must be an integer 0…999999999") { body(["epoch": "1e3"]) },
        Case(label: "epoch past its range", reason: "epoch must be an integer 0…999999999") { body(["epoch": "1000000000"]) },
        Case(label: "epoch past Int64", reason: "epoch must be an integer 0…999999999") { body(["epoch": "9223372036854775808"]) },
        Case(label: "epoch as a string", reason: "epoch must be an integer 0…999999999") { body(["epoch": "\"1\""]) },
        Case(label: "size as a string", reason: "size must be an integer 0…9223372036854775807") { body(["size": "\"100\""]) },
        Case(label: "size null", reason: "missing field 'size'") { body(["size": "null"]) },
        Case(label: "version with a letter", reason: "version must be dotted decimal numbers (1 to 8 components, each 0…999999999)") {
            body(["version": "\"1.x\""])
        },
        Case(label: "miniVersion as a number", reason: "miniVersion must be dotted decimal numbers (1 to 8 components, each 0…999999999)") {
            body(["miniVersion": "1"])
        },
        Case(label: "whitelist entry not http(s)", reason: "whitelist must be an array of absolute http(s) URLs") {
            body(["whitelist": "[\"ftp://h5.example.com/\"]"])
        },
        Case(label: "whitelist entry relative", reason: "whitelist must be an array of absolute http(s) URLs") {
            body(["whitelist": "[\"/mall/\"]"])
        },
        Case(label: "whitelist as a string", reason: "whitelist must be an array of absolute http(s) URLs") {
            body(["whitelist": "\"https://h5.example.com/mall/\""])
        },
        Case(label: "networkType 5g", reason: "networkType must be \"any\" or \"wifi\"") { body(["networkType": "\"5g\""]) },
        Case(label: "compression br", reason: "compression must be \"none\" or \"gzip\"") { body(["compression": "\"br\""]) },
        Case(label: "expires not RFC 3339", reason: "expires must be an RFC 3339 time") { body(["expires": "\"tomorrow\""]) },
        Case(label: "expires as a number", reason: "expires must be an RFC 3339 time") { body(["expires": "1767225600"]) },
        Case(label: "isPatch as a string", reason: "isPatch must be true or false") { body(["isPatch": "\"yes\""]) },
        Case(label: "sha256 in upper case", reason: "sha256 must be 64 lowercase hex digits") {
            body(["sha256": "\"\(String(repeating: "A", count: 64))\""])
        },
        Case(label: "url with a javascript scheme", reason: "url must be an http(s) URL, absolute or relative to the manifest") {
            body(["url": "\"javascript:alert(1)\""])
        },
        Case(label: "app as a number", reason: "app must be a name matching [a-z0-9][a-z0-9._-]{0,63}") { body(["app": "5"]) },
        Case(label: "patch without fullSize", reason: "fullSize is required when isPatch is true") {
            body(["isPatch": "true", "baseVersion": "\"1.0.0\"", "fullUrl": "\"files/1.1.0.zip\""])
        },
    ]

    static func check(_ testCase: Case) throws {
        let error = try #require(throws: OfflineAgentError.self) { try Manifest.decode(Data(testCase.body())) }
        #expect(error.code == .manifest)
        #expect(error.cause == .manifestInvalid, "\(error)")
        if testCase.prefixOnly {
            #expect(error.reason.hasPrefix(testCase.reason), "\(error.reason)")
            #expect(Int(error.reason.dropFirst(testCase.reason.count)) != nil, "ends with a byte offset: \(error.reason)")
        } else {
            #expect(error.reason == testCase.reason)
        }
    }

    @Test("a key repeated anywhere in the body refuses the manifest", arguments: duplicates)
    func duplicatedKey(_ testCase: Case) throws { try Self.check(testCase) }

    @Test("what JSON parsers disagree on is refused", arguments: leniencies)
    func leniency(_ testCase: Case) throws { try Self.check(testCase) }

    @Test("a field error names the field and its rule", arguments: fieldRules)
    func fieldRule(_ testCase: Case) throws { try Self.check(testCase) }

    @Test("strict is not fussy: escapes, null optionals, unknown nested fields and status are accepted")
    func acceptsValid() throws {
        let manifest = try Manifest.decode(Data(Self.body(
            ["url": "\"files\\/1.1.0\\u002ezip\"", "fullUrl": "null", "expires": "null", "status": "0"],
            append: " , \"notes\" : {\"text\": \"caf\\u00e9 \\ud83d\\ude00\", \"list\": [1, -2.5e3, true, null]}\n")))
        #expect(manifest.url == "files/1.1.0.zip")
        #expect(manifest.size == 100)
        #expect(manifest.fullUrl == nil && manifest.expires == nil)
        #expect(manifest.rollout == 100)
    }

    @Test("a duplicated size through sync: refused before any download, installed version intact")
    func duplicatedKeyThroughSync() async throws {
        let h = try SyncHarness()
        try await h.install("1.0.0")
        var text = String(decoding: try JSONSerialization.data(withJSONObject: h.full("1.1.0"), options: [.sortedKeys]), as: UTF8.self)
        text.removeLast()
        h.origin.setManifest(raw: Array((text + ",\"size\":1}").utf8))
        let before = h.origin.requests.filter { $0.path.hasPrefix("/files/") }.count
        let report = await h.sync()
        #expect(report.result == .failed)
        #expect(report.error?.cause == .manifestInvalid, "\(report.error?.description ?? "")")
        #expect(report.error?.reason.contains("duplicated key 'size'") == true)
        #expect(h.origin.requests.filter { $0.path.hasPrefix("/files/") }.count == before)
        #expect(h.activeMatches("1.0.0"))
    }

    // MARK: - publish --expires

    static func publishArguments(_ out: String, _ version: String) -> [String] {
        ["publish", "--app", "sample", "--version", version, "--source", PublishFixtures.sampleApp(version), "--out", out,
         "--unsigned", "--whitelist", "https://h5.example.com/sample/"]
    }

    @Test("publish refuses an --expires that has already passed (exit 64, nothing written)",
          arguments: ["2020-01-01T00:00:00Z", "1970-01-01T00:00:00Z", "past-minute"])
    func publishPastExpiry(_ given: String) async throws {
        let scratch = TemporaryDirectory("expires")
        let out = scratch.file("out")
        let expires = given == "past-minute" ? RFC3339.string(from: Date().addingTimeInterval(-60)) : given
        let result = try await CLI.run(Self.publishArguments(out, "1.0.0") + ["--expires", expires], executable: CLI.publisher)
        #expect(result.status == 64, "\(result.stderr)")
        #expect(result.stderr.contains("--expires \(expires) has already passed"), "\(result.stderr)")
        #expect(!FileManager.default.fileExists(atPath: "\(out)/sample"))
    }

    @Test("Publisher refuses a past expiry, given or kept from the previous publish, and changes nothing")
    func publisherPastExpiry() throws {
        let scratch = TemporaryDirectory("expires")
        let out = scratch.file("out")
        func options(_ version: String, _ expires: PublishOptions.Expiry) -> PublishOptions {
            PublishOptions(app: "sample", version: Version(version)!, sourceDirectory: PublishFixtures.sampleApp(version),
                           publishDirectory: out, expires: expires)
        }
        let given = try #require(throws: PublishError.self) {
            try Publisher.publish(options("1.0.0", .at(Date(timeIntervalSince1970: 1_577_836_800))))
        }
        #expect(given.code == .usage && given.cause == .usage)
        #expect(given.reason == "expires 2020-01-01T00:00:00Z has already passed: no device would accept the manifest")
        #expect(!FileManager.default.fileExists(atPath: "\(out)/sample"))

        // A previous publish's expiry that has passed since: keeping it is refused too.
        _ = try Publisher.publish(options("1.0.0", .at(Date(timeIntervalSince1970: 4_102_444_800))))
        let statePath = "\(out)/sample/\(PublishState.fileName)"
        let state = try String(contentsOfFile: statePath, encoding: .utf8)
        #expect(state.contains("2100-01-01T00:00:00Z"))
        try state.replacingOccurrences(of: "2100-01-01T00:00:00Z", with: "2020-01-01T00:00:00Z")
            .write(toFile: statePath, atomically: true, encoding: .utf8)
        let before = PublishFixtures.tree(out)
        let kept = try #require(throws: PublishError.self) { try Publisher.publish(options("1.1.0", .keep)) }
        #expect(kept.code == .usage)
        #expect(kept.reason.hasPrefix("the kept expires 2020-01-01T00:00:00Z has already passed"), "\(kept.reason)")
        #expect(PublishFixtures.tree(out) == before)
        // Saying so explicitly is how the operator moves on.
        #expect(try Publisher.publish(options("1.1.0", .never)).state.expires == nil)
    }
}
