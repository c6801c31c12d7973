import Foundation
import Testing
@testable import OfflineAgent
@testable import OfflineServe
import TestSupport

/// The kill switch (`rollout`, `miniVersion`) holds on every route of `offline-agent
/// serve` that could hand out package bytes, and no cache keeps an old decision.
@Suite("ServeKillSwitch")
struct ServeKillSwitchTests {
    typealias F = LocalStoreFixture
    static let network = "https://h5.example.invalid/mall/"

    /// A device id whose bucket for `mall` is above 1, so a rollout just below it exists.
    static let device: String = {
        (0...).lazy.map { "device-\($0)" }.first { Resolver.rolloutBucket(deviceID: $0, app: "mall") > 1 }!
    }()
    static var bucket: Int { Resolver.rolloutBucket(deviceID: device, app: "mall") }

    /// How `mall` 1.0.0 is installed; `gate` nil when it must be served.
    enum Condition: String, CaseIterable, CustomTestStringConvertible {
        case served, rolloutZero, belowBucket, atBucket, recordMiniVersion, knownMiniVersion

        var testDescription: String { rawValue }

        var gate: FallbackReason? {
            switch self {
            case .served, .atBucket: nil
            case .rolloutZero, .belowBucket: .outsideRollout
            case .recordMiniVersion, .knownMiniVersion: .belowMiniVersion
            }
        }

        func fixture() throws -> LocalStoreFixture {
            let f = LocalStoreFixture()
            let files = [
                "big.bin": localRandomBytes(300_000, seed: 7), "huge.bin": localRandomBytes(3 << 20, seed: 9),
                "pages/index.html": Array("<p>pages</p>".utf8),
            ]
            switch self {
            case .served, .knownMiniVersion: try f.add(version: "1.0.0", files: files)
            case .rolloutZero: try f.add(version: "1.0.0", files: files, rollout: 0)
            case .belowBucket: try f.add(version: "1.0.0", files: files, rollout: ServeKillSwitchTests.bucket - 1)
            case .atBucket: try f.add(version: "1.0.0", files: files, rollout: ServeKillSwitchTests.bucket)
            case .recordMiniVersion: try f.add(version: "1.0.0", files: files, miniVersion: "1.0.1")
            }
            if self == .knownMiniVersion {
                var check = f.store.checkState("mall")
                check.knownMiniVersion = Version("2.0.0")
                try f.store.saveCheckState(check, for: "mall")
            }
            return f
        }
    }

    /// A request that can carry package bytes (or vouch for cached ones), what it gets when
    /// served, and where it goes when the kill switch is on.
    struct Route: Sendable, CustomTestStringConvertible {
        var name: String
        var target: String
        var method = "GET"
        var headers: [(String, String)] = []
        /// Status when served.
        var served: Int
        /// Location when gated (the whitelisted network URL).
        var network: String

        var testDescription: String { name }
    }

    static let routes: [Route] = [
        Route(name: "GET file", target: "/mall/index.html", served: 200, network: network + "index.html"),
        Route(name: "HEAD file", target: "/mall/index.html", method: "HEAD", served: 200, network: network + "index.html"),
        Route(name: "Range", target: "/mall/js/app.js", headers: [("Range", "bytes=0-9")], served: 206, network: network + "js/app.js"),
        Route(name: "Range of a streamed file", target: "/mall/huge.bin", headers: [("Range", "bytes=70000-200000")], served: 206,
              network: network + "huge.bin"),
        Route(name: "kept file", target: "/mall/big.bin", served: 200, network: network + "big.bin"),
        Route(name: "streamed file", target: "/mall/huge.bin", served: 200, network: network + "huge.bin"),
        Route(name: "304 for a cached copy", target: "/mall/css/app.css",
              headers: [("If-Modified-Since", "Fri, 01 Jan 2100 00:00:00 GMT")], served: 304, network: network + "css/app.css"),
        Route(name: "directory index with query", target: "/mall/?lang=zh", served: 200, network: network + "?lang=zh"),
        Route(name: "app root without slash", target: "/mall", served: 301, network: network),
        Route(name: "directory without slash", target: "/mall/pages", served: 301, network: network + "pages"),
        Route(name: "/open", target: "/open?url=\((network + "index.html").localQueryEncoded)", served: 302, network: network + "index.html"),
        Route(name: "/session/item", target: "/session/item?url=\((network + "js/app.js?v=2").localQueryEncoded)", served: 302,
              network: network + "js/app.js?v=2"),
    ]

    @Test("no route serves a version the kill switch turns off", arguments: Condition.allCases, routes)
    func everyRoute(condition: Condition, route: Route) async throws {
        let f = try condition.fixture()
        try await withLocalServer(f, deviceID: Self.device) { server in
            // Twice: the second answer comes from whatever the first one cached.
            for attempt in 1...2 {
                let response = try await LocalHTTP.request(port: server.port, route.target, method: route.method, headers: route.headers)
                let label = "\(condition) \(route.name) #\(attempt)"
                // /open and /session/item send a mirrored origin's URLs to its mirror, which then forwards.
                let redirects = route.target.hasPrefix("/open") || route.target.hasPrefix("/session")
                let mirrorBase = "http://h5.example.invalid.localhost:\(server.port)"
                if let gate = condition.gate {
                    #expect(response.status == 302, "\(label)")
                    let network = redirects ? mirrorBase + route.network.dropFirst("https://h5.example.invalid".count) : route.network
                    #expect(response.header("location") == network, "\(label)")
                    #expect(response.body.isEmpty, "\(label)")
                    #expect(response.header("x-offline-version") == nil, "\(label)")
                    #expect(response.header("etag") == nil && response.header("last-modified") == nil, "\(label)")
                    if !route.target.hasPrefix("/open"), !route.target.hasPrefix("/session") {
                        #expect(response.header("x-offline-fallback") == gate.rawValue, "\(label)")
                    }
                } else {
                    #expect(response.status == route.served, "\(label)")
                    if route.served == 302 { #expect(response.header("location")?.hasPrefix(mirrorBase + "/mall/") == true, "\(label)") }
                    if route.served == 200 || route.served == 206 { #expect(response.header("x-offline-version") == "1.0.0", "\(label)") }
                }
            }
            if let gate = condition.gate, route.target.hasPrefix("/mall") {
                #expect(server.metrics.networkFallbacks(app: "mall", reason: gate) == 2)
                #expect(server.metrics.fileResponses(app: "mall", code: 302) == 2)
            }
        }
    }

    /// A change of the on-disk state that turns the kill switch on, and the one that turns it off again.
    struct Change: Sendable, CustomTestStringConvertible {
        var name: String
        var on: @Sendable (LocalStoreFixture) throws -> Void
        var off: @Sendable (LocalStoreFixture) throws -> Void
        var gate: FallbackReason
        var testDescription: String { name }
    }

    static func setRecord(_ f: LocalStoreFixture, inPlace: Bool = false, _ change: (inout InstalledVersion) -> Void) throws {
        var record = try #require(f.store.active("mall"))
        change(&record)
        if inPlace {
            // Same inode: only the size or time of the file says it changed.
            let data = try Store.encoder.encode(record)
            let handle = try #require(FileHandle(forWritingAtPath: f.directory("1.0.0") + ".json"))
            try handle.truncate(atOffset: 0)
            try handle.write(contentsOf: data)
            try handle.close()
        } else {
            try f.store.updateRecord(record, app: "mall")
        }
    }

    static func setKnownMiniVersion(_ f: LocalStoreFixture, _ version: String?) throws {
        var check = f.store.checkState("mall")
        check.knownMiniVersion = version.flatMap(Version.init)
        try f.store.saveCheckState(check, for: "mall")
    }

    static let changes: [Change] = [
        Change(name: "record rewritten with rollout 0", on: { try setRecord($0) { $0.rollout = 0 } },
               off: { try setRecord($0) { $0.rollout = 100 } }, gate: .outsideRollout),
        Change(name: "record rewritten in place with rollout 0", on: { try setRecord($0, inPlace: true) { $0.rollout = 0 } },
               off: { try setRecord($0, inPlace: true) { $0.rollout = 100 } }, gate: .outsideRollout),
        Change(name: "record rewritten with a higher miniVersion", on: { try setRecord($0) { $0.miniVersion = Version("1.5.0")! } },
               off: { try setRecord($0) { $0.miniVersion = Version("1.0.0")! } }, gate: .belowMiniVersion),
        Change(name: "a manifest announced a higher miniVersion", on: { try setKnownMiniVersion($0, "1.0.1") },
               off: { try setKnownMiniVersion($0, "1.0.0") }, gate: .belowMiniVersion),
        Change(name: "check state appears, then goes", on: { try setKnownMiniVersion($0, "3.0.0") },
               off: { try FileManager.default.removeItem(atPath: $0.store.checkStatePath("mall")) }, gate: .belowMiniVersion),
    ]

    @Test("a kill switch set on disk holds from the next request, and lifting it serves again", arguments: changes)
    func noStaleDecision(change: Change) async throws {
        let f = try LocalServerTests.mall(huge: true)
        try await withLocalServer(f) { server in
            let port = server.port
            let js = F.fixtureBytes("1.0.0", "js/app.js")
            // Warm every cache: the kept pin, the kept small file, the validators.
            let first = try await LocalHTTP.request(port: port, "/mall/js/app.js")
            #expect(first.status == 200 && first.body == js)
            let etag = try #require(first.header("etag"))
            let cached = try await LocalHTTP.request(port: port, "/mall/js/app.js", headers: [("If-None-Match", etag)])
            #expect(cached.status == 304)

            try change.on(f)
            for (target, headers) in [("/mall/js/app.js", [("If-None-Match", etag)]), ("/mall/js/app.js", []), ("/mall/huge.bin", [])] {
                let response = try await LocalHTTP.request(port: port, target, headers: headers)
                #expect(response.status == 302, "\(change.name): \(target)")
                #expect(response.header("x-offline-fallback") == change.gate.rawValue)
                #expect(response.body.isEmpty)
            }
            try change.off(f)
            let again = try await LocalHTTP.request(port: port, "/mall/js/app.js")
            #expect(again.status == 200 && again.body == js, "\(change.name): lifted")
            let huge = try await LocalHTTP.request(port: port, "/mall/huge.bin", headers: [("Range", "bytes=0-15")])
            #expect(huge.status == 206 && huge.body == Array(localRandomBytes(LocalServerTests.hugeSize, seed: 9)[0..<16]))
        }
    }

    @Test("a gated app with no http(s) whitelist entry answers 404, never its files", arguments: [[], ["ftp://h5.example.invalid/mall/"]])
    func gatedWithoutWhitelist(whitelist: [String]) async throws {
        let f = LocalStoreFixture()
        try f.add(version: "1.0.0", whitelist: whitelist, rollout: 0)
        try await withLocalServer(f) { server in
            for target in ["/mall/index.html", "/mall/", "/mall"] {
                let response = try await LocalHTTP.request(port: server.port, target)
                #expect(response.status == 404, "\(target)")
                #expect(response.header("x-offline-fallback") == "outside-rollout")
                #expect(!response.text.contains("<html"))
            }
        }
    }

    @Test("the network URL keeps the whitelist prefix, the raw path and the query", arguments: [
        (["https://h5.example.invalid/mall/"], "a/b.js", "x=1", "https://h5.example.invalid/mall/a/b.js?x=1"),
        (["https://h5.example.invalid/mall"], "a%20b.js", nil, "https://h5.example.invalid/mall/a%20b.js"),
        (["https://h5.example.invalid"], "", nil, "https://h5.example.invalid/"),
        (["https://h5.example.invalid/mall/?v=1#top"], "%zz", "q", "https://h5.example.invalid/mall/%zz?q"),
        (["not a url", "mailto:x@example.invalid", "http://h5.example.invalid:8080/m/"], "i.html", nil, "http://h5.example.invalid:8080/m/i.html"),
    ] as [([String], String, String?, String)])
    func networkLocation(whitelist: [String], rest: String, query: String?, expected: String) {
        #expect(LocalNetworkFallback.location(whitelist: whitelist, rest: rest, query: query) == expected)
    }
}
