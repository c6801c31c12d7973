import Crypto
import Foundation
import Testing
@testable import OfflineAgent
import TestSupport

/// `sync --config` and `check-config` read the file fail-closed: one usage line (exit
/// 64) naming the key path, never the decoder's dump; unsigned apps must say so.
@Suite("Config files fail closed")
struct ConfigFileTests {
    struct Bad: CustomTestStringConvertible, Sendable {
        var label: String
        var json: String
        var message: String
        var testDescription: String { label }
    }

    static let app = #"{"app": "mall", "manifest": "http://127.0.0.1:9/m"}"#

    static let bad: [Bad] = [
        Bad(label: "misspelt top-level key", json: #"{"root": "/r", "allowUnsigned": true, "netwrok": "metered", "apps": [\#(app)]}"#,
            message: "unknown key 'netwrok' (did you mean 'network'?)"),
        Bad(label: "misspelt app key", json: #"{"root": "/r", "allowUnsigned": true, "apps": [{"app": "mall", "manfest": "http://x/m"}]}"#,
            message: "unknown key 'apps[0].manfest' (did you mean 'manifest'?)"),
        Bad(label: "publicKey list under the singular name's typo", json: #"{"root": "/r", "publicKes": [], "apps": [\#(app)]}"#,
            message: "unknown key 'publicKes' (did you mean 'publicKey'?)"),
        Bad(label: "manifest is a number", json: #"{"root": "/r", "allowUnsigned": true, "apps": [{"app": "mall", "manifest": 42}]}"#,
            message: "apps[0].manifest: expected a string"),
        Bad(label: "allowUnsigned is a string", json: #"{"root": "/r", "allowUnsigned": "yes", "apps": [\#(app)]}"#,
            message: "allowUnsigned: expected true or false"),
        Bad(label: "apps is an object", json: #"{"root": "/r", "allowUnsigned": true, "apps": {"app": "mall"}}"#,
            message: "apps: expected a list"),
        Bad(label: "an app without its name", json: #"{"root": "/r", "allowUnsigned": true, "apps": [{"manifest": "http://x/m"}]}"#,
            message: "missing key 'apps[0].app'"),
        Bad(label: "an unknown network", json: #"{"root": "/r", "allowUnsigned": true, "network": "wifi", "apps": [\#(app)]}"#,
            message: "network: expected \"auto\", \"metered\" or \"unmetered\""),
        Bad(label: "an unsigned app that does not say so", json: #"{"root": "/r", "apps": [\#(app)]}"#,
            message: "app 'mall' has no trusted key"),
        Bad(label: "a key that is not a key", json: #"{"root": "/r", "publicKeys": ["bm9wZQ=="], "apps": [\#(app)]}"#,
            message: "trusted key 1 is not 32 bytes of base64"),
        Bad(label: "misspelt reportToken", json: #"{"root": "/r", "allowUnsigned": true, "reportTokn": "sekrit", "apps": [\#(app)]}"#,
            message: "unknown key 'reportTokn' (did you mean 'reportToken'?)"),
        Bad(label: "misspelt app reportToken", json: #"{"root": "/r", "allowUnsigned": true, "apps": [{"app": "mall", "manifest": "http://x/m", "reportTokem": "sekrit"}]}"#,
            message: "unknown key 'apps[0].reportTokem' (did you mean 'reportToken'?)"),
        Bad(label: "a reportToken with a space", json: #"{"root": "/r", "allowUnsigned": true, "report": "http://c/r", "reportToken": "sekrit value", "apps": [\#(app)]}"#,
            message: "reportToken: must be 1 to 512 visible ASCII characters"),
        Bad(label: "an empty app reportToken", json: #"{"root": "/r", "allowUnsigned": true, "report": "http://c/r", "apps": [{"app": "mall", "manifest": "http://x/m", "reportToken": ""}]}"#,
            message: "apps[0].reportToken: must be 1 to 512 visible ASCII characters"),
        Bad(label: "a reportToken that is a number", json: #"{"root": "/r", "allowUnsigned": true, "reportToken": 42, "apps": [\#(app)]}"#,
            message: "reportToken: expected a string"),
        Bad(label: "a reportToken no app reports with", json: #"{"root": "/r", "allowUnsigned": true, "reportToken": "sekrit", "apps": [\#(app)]}"#,
            message: "reportToken: no app reports to the top-level report URL, the only one the token goes to"),
        Bad(label: "a top-level reportToken only apps with their own report could use",
            json: #"{"root": "/r", "allowUnsigned": true, "reportToken": "sekrit", "apps": [{"app": "mall", "manifest": "http://x/m", "report": "http://c/r"}]}"#,
            message: "reportToken: no app reports to the top-level report URL, the only one the token goes to"),
        Bad(label: "an app reportToken without its report", json: #"{"root": "/r", "allowUnsigned": true, "apps": [{"app": "mall", "manifest": "http://x/m", "reportToken": "sekrit"}]}"#,
            message: "apps[0].reportToken: the app has no report URL to send it to"),
        Bad(label: "one collector, two tokens",
            json: #"{"root": "/r", "allowUnsigned": true, "report": "http://c/r", "reportToken": "sekrit", "apps": [\#(app), {"app": "help", "manifest": "http://x/h", "reportToken": "sekrit2"}]}"#,
            message: "apps[1].reportToken differs from apps[0]'s for the same report URL http://c/r: give one collector one token"),
        // Issue 39, surprise 8: what sync refused after check-config passed it.
        Bad(label: "one app listed twice", json: #"{"root": "/r", "allowUnsigned": true, "apps": [\#(app), \#(app)]}"#,
            message: "apps[1].app: 'mall' is listed twice (also apps[0])"),
        Bad(label: "an app name with capitals", json: #"{"root": "/r", "allowUnsigned": true, "apps": [{"app": "Netron", "manifest": "http://x/m"}]}"#,
            message: "apps[0].app: invalid app name 'Netron'"),
        Bad(label: "an app name with a slash", json: #"{"root": "/r", "allowUnsigned": true, "apps": [{"app": "../etc", "manifest": "http://x/m"}]}"#,
            message: "apps[0].app: invalid app name '../etc'"),
        // Issue 39, row 1: the origins an app may claim.
        Bad(label: "an allowed origin that is no origin", json: #"{"root": "/r", "allowUnsigned": true, "apps": [{"app": "mall", "manifest": "http://x/m", "allowedOrigins": ["ftp://x"]}]}"#,
            message: "apps[0].allowedOrigins: 'ftp://x' is not an origin"),
        Bad(label: "allowedOrigins misspelt", json: #"{"root": "/r", "allowUnsigned": true, "apps": [{"app": "mall", "manifest": "http://x/m", "allowedOrigin": ["https://x"]}]}"#,
            message: "unknown key 'apps[0].allowedOrigin' (did you mean 'allowedOrigins'?)"),
    ]

    /// Issue 39, surprise 12: a FIFO (or any file that is not a regular file) is refused at
    /// once, with a usage error; reading it would wait for a writer for ever.
    @Test("sync --config and check-config naming a FIFO are refused at once (exit 64)")
    func fifo() async throws {
        let dir = TemporaryDirectory("config")
        let file = dir.file("agent.json")
        #expect(mkfifo(file, 0o600) == 0)
        for command in [["sync", "--config", file], ["check-config", file]] {
            let running = try CLI.start(command)
            // Bounded: a process still reading the FIFO after this (the fault) gets an end
            // of file from a writer that opens and closes it, so the test ends either way.
            for _ in 0..<3000 where running.process.isRunning { try await Task.sleep(for: .milliseconds(100)) }
            let waited = running.process.isRunning
            if waited {
                let writer = open(file, O_WRONLY | O_NONBLOCK)
                if writer >= 0 { close(writer) }
            }
            let result = await CLI.finish(running)
            #expect(!waited, "\(command[0]) waited on the FIFO")
            #expect(result.status == 64, "\(command[0]): \(result.stderr)")
            #expect(result.stderr.contains("not a regular file"), "\(command[0]): \(result.stderr)")
        }
    }

    @Test("a bad config is one usage line naming the key path", arguments: bad)
    func rejected(_ bad: Bad) async throws {
        let dir = TemporaryDirectory("config")
        let file = dir.file("agent.json")
        try bad.json.write(toFile: file, atomically: true, encoding: .utf8)
        for command in [["sync", "--config", file], ["check-config", file]] {
            let result = try await CLI.run(command)
            #expect(result.status == 64, "\(command[0]): \(result.stderr)")
            let lines = result.stderr.split(separator: "\n")
            #expect(lines.count == 1, "\(command[0]): \(result.stderr)")
            #expect(result.stderr.contains(bad.message), "\(command[0]): \(result.stderr)")
            #expect(!result.stderr.contains("codingPath") && !result.stderr.contains("DecodingError"))
            #expect(!result.stderr.contains("sekrit"), "a token is never echoed")
        }
    }

    @Test("check-config prints each app's manifest, key fingerprints or unsigned, profile and network")
    func checkConfig() async throws {
        let key = Curve25519.Signing.PrivateKey().publicKey.rawRepresentation
        let fingerprint = "SHA256:" + SHA256.hash(data: key).prefix(8).hex
        let dir = TemporaryDirectory("config")
        let file = dir.file("agent.json")
        let config: [String: Any] = [
            "root": "/r", "network": "metered", "publicKeys": [key.base64EncodedString()],
            "apps": [
                ["app": "mall", "manifest": "http://127.0.0.1:9/m"],
                ["app": "help", "manifest": "http://127.0.0.1:9/h", "allowUnsigned": true, "publicKeys": [], "profile": "alice"],
            ],
        ]
        try JSONSerialization.data(withJSONObject: config).write(to: URL(fileURLWithPath: file))
        let result = try await CLI.run(["check-config", file])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("mall: manifest http://127.0.0.1:9/m\n  keys: \(fingerprint)\n  profile: default\n  network: metered"), "\(result.stdout)")
        // An empty list of its own names no key: the top-level keys apply.
        #expect(result.stdout.contains("help: manifest http://127.0.0.1:9/h\n  keys: \(fingerprint)\n  profile: alice"), "\(result.stdout)")
    }
}
