import Foundation
import Testing
@testable import OfflineAgent

/// The manifest's optional `fallback` (the entry page for single-page routes on a
/// mirrored origin): a normalised relative path inside the package or a refusal that
/// names the rule, carried into the installed version's record.
@Suite("Manifest fallback")
struct ManifestFallbackTests {
    static func decode(_ fallback: String?) throws -> Manifest {
        try Manifest.decode(Data(ManifestStrictnessTests.body(fallback.map { ["fallback": $0] } ?? [:])))
    }

    @Test("accepted fallbacks are kept as given", arguments: [
        "index.html", "app/index.html", "a/b/c/shell.htm", "spa-entry_1.html", "%E4.html",
    ])
    func accepted(_ path: String) throws {
        #expect(try Self.decode("\"\(path)\"").fallback == path)
    }

    @Test("no fallback, or null, means none")
    func absent() throws {
        #expect(try Self.decode(nil).fallback == nil)
        #expect(try Self.decode("null").fallback == nil)
    }

    @Test("refused fallbacks name the field and its rule", arguments: [
        ("\"/index.html\"", "leading slash"), ("\"../index.html\"", "parent segment"), ("\"a/../index.html\"", "inner parent"),
        ("\"./index.html\"", "dot segment"), ("\"a//index.html\"", "empty segment"), ("\"app/\"", "trailing slash"),
        ("\"\"", "empty"), ("\"a\\\\b.html\"", "backslash"), ("\"a\\u0000.html\"", "NUL"), ("\"index.html?x\"", "query"),
        ("\"index.html#top\"", "fragment"), ("\"a\\nb\"", "control character"), ("\"..\"", "only a parent"),
        ("\"\(String(repeating: "a", count: 1025))\"", "over 1024 bytes"), ("1", "a number"), ("[\"index.html\"]", "an array"),
        ("true", "a boolean"), ("\"../\\u0301index.html\"", "a parent whose slash a combining mark's cluster holds"),
        ("\"a\\u0600/../\\u0301x.html\"", "an inner parent between slashes held by a prepended and a combining mark"),
    ])
    func refused(_ raw: String, _ label: String) {
        #expect(throws: OfflineAgentError.self, "\(label)") { try Self.decode(raw) }
        do {
            _ = try Self.decode(raw)
        } catch let error as OfflineAgentError {
            #expect(error.cause == .manifestInvalid, "\(label)")
            #expect(error.reason == ManifestFields.rule("fallback"), "\(label)")
            #expect(error.reason.hasPrefix("fallback must be"), "\(label)")
        } catch {
            Issue.record("\(label): \(error)")
        }
    }

    @Test("a manifest made in code is checked too, and encodes the field only when set")
    func checkFieldsAndEncoding() throws {
        var manifest = try Self.decode("\"index.html\"")
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        #expect(String(decoding: try encoder.encode(manifest), as: UTF8.self).contains("\"fallback\":\"index.html\""))
        manifest.fallback = "../x"
        #expect(throws: OfflineAgentError.self) { try manifest.checkFields() }
        manifest.fallback = nil
        #expect(!String(decoding: try encoder.encode(manifest), as: UTF8.self).contains("fallback"))
    }

    @Test("an installed record carries the fallback; an old record without it still decodes")
    func record() throws {
        let record = InstalledVersion(
            version: Version("1.0.0")!, packageSha256: String(repeating: "0", count: 64), miniVersion: Version("1.0.0")!,
            whitelist: ["https://h5.example.com/"], rollout: 100, installedAt: Date(timeIntervalSince1970: 0), via: .full,
            fallback: "index.html")
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        let data = try encoder.encode(record)
        #expect(try decoder.decode(InstalledVersion.self, from: data).fallback == "index.html")
        var object = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        object["fallback"] = nil
        let old = try decoder.decode(InstalledVersion.self, from: JSONSerialization.data(withJSONObject: object))
        #expect(old.fallback == nil && old.version == record.version)
    }
}
