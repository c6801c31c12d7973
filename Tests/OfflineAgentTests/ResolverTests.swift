import Crypto
import Foundation
import Testing
@testable import OfflineAgent
import TestSupport

@Suite("Resolver")
struct ResolverTests {
    /// A store with hand-made versions of two apps, without any network.
    final class Fixture: @unchecked Sendable {
        let root = TemporaryDirectory("resolve")
        var store: Store { Store(root: root.path) }

        func add(_ app: String, version: String, whitelist: [String], miniVersion: String = "0", rollout: Int = 100,
                 files: [String: String] = ["index.html": "home", "js/app.js": "js", "a b.txt": "space"]) throws {
            try store.prepare(app)
            let v = Version(version)!
            let dir = store.versionDirectory(app, v)
            for (name, content) in files {
                let path = "\(dir)/\(name)"
                try FileManager.default.createDirectory(atPath: FileSystem.parent(of: path), withIntermediateDirectories: true)
                try content.write(toFile: path, atomically: true, encoding: .utf8)
            }
            let record = InstalledVersion(version: v, packageSha256: String(repeating: "0", count: 64), miniVersion: Version(miniVersion)!,
                                          whitelist: whitelist, rollout: rollout, installedAt: Date(), via: .full)
            try store.updateRecord(record, app: app)
            try store.activate(app, v)
        }

        func resolve(_ url: String, device: String = "device") -> Resolution {
            Resolver(store: store, deviceID: device).resolve(URL(string: url)!)
        }

        func path(_ url: String, device: String = "device") -> String? {
            if case .file(let file) = resolve(url, device: device) { return file.path }
            return nil
        }
    }

    @Test("rollout bucket matches the protocol formula")
    func bucket() {
        let digest = Array(SHA256.hash(data: Data("abc:mall".utf8)))
        let value = (UInt32(digest[0]) << 24) | (UInt32(digest[1]) << 16) | (UInt32(digest[2]) << 8) | UInt32(digest[3])
        #expect(Resolver.rolloutBucket(deviceID: "abc", app: "mall") == 1 + Int(value % 100))
        let buckets = (0..<2000).map { Resolver.rolloutBucket(deviceID: "d\($0)", app: "mall") }
        #expect(buckets.min() == 1)
        #expect(buckets.max() == 100)
    }

    @Test("whitelist prefixes match on scheme, host, port and a / boundary")
    func whitelist() throws {
        let f = Fixture()
        try f.add("mall", version: "1.0", whitelist: ["https://h5.example.com/mall/", "http://static.example.com:8080/m"])
        let dir = f.store.versionDirectory("mall", Version("1.0")!)
        #expect(f.path("https://h5.example.com/mall/js/app.js") == "\(dir)/js/app.js")
        #expect(f.path("https://H5.EXAMPLE.com:443/mall/js/app.js?v=3#top") == "\(dir)/js/app.js")
        #expect(f.path("https://h5.example.com/mall/") == "\(dir)/index.html")
        #expect(f.path("https://h5.example.com/mall/a%20b.txt") == "\(dir)/a b.txt")
        #expect(f.resolve("http://h5.example.com/mall/index.html") == .network(.notWhitelisted, app: nil))
        #expect(f.resolve("https://h5.example.com:8443/mall/index.html") == .network(.notWhitelisted, app: nil))
        #expect(f.resolve("https://h5.example.com/mallx/index.html") == .network(.notWhitelisted, app: nil))
        #expect(f.resolve("https://evil.com/mall/index.html") == .network(.notWhitelisted, app: nil))
        #expect(f.path("http://static.example.com:8080/m") == "\(dir)/index.html")
        #expect(f.path("http://static.example.com:8080/m/js/app.js") == "\(dir)/js/app.js")
        #expect(f.resolve("http://static.example.com:8080/mx/js/app.js") == .network(.notWhitelisted, app: nil))
        #expect(f.resolve("http://static.example.com/m/js/app.js") == .network(.notWhitelisted, app: nil))
    }

    @Test("paths that leave the version directory are refused", arguments: [
        "../secret.txt", "%2e%2e/secret.txt", "js/%2e%2e/%2e%2e/secret.txt", "js/../index.html", "a%00b", "%2fetc/passwd",
        "js%5c..%5csecret.txt", "link.txt", "js", "missing.html", "js/",
        // A slash in a combining mark's grapheme cluster is still a slash to the kernel.
        "../%CC%81secret.txt", "%2e%2e%2f%CC%81secret.txt",
    ])
    func traversal(_ rest: String) throws {
        let f = Fixture()
        try f.add("mall", version: "1.0", whitelist: ["https://h5.example.com/mall/"])
        try "secret".write(toFile: "\(f.store.versionsDirectory("mall"))/secret.txt", atomically: true, encoding: .utf8)
        try "secret".write(toFile: "\(f.store.versionsDirectory("mall"))/\u{301}secret.txt", atomically: true, encoding: .utf8)
        try FileManager.default.createSymbolicLink(atPath: "\(f.store.versionDirectory("mall", Version("1.0")!))/link.txt", withDestinationPath: "/etc/passwd")
        #expect(f.resolve("https://h5.example.com/mall/\(rest)") == .network(.missingFile, app: "mall"))
    }

    @Test("a file named like a directory above it resolves: only the last component must be a file")
    func fileNamedLikeItsDirectory() throws {
        let f = Fixture()
        try f.add("mall", version: "1.0", whitelist: ["https://h5.example.com/mall/"], files: ["docs/api/docs": "leaf", "a/b/a": "leaf"])
        for rest in ["docs/api/docs", "a/b/a"] {
            guard case .file(let file) = f.resolve("https://h5.example.com/mall/\(rest)") else {
                Issue.record("\(rest) did not resolve to its file")
                continue
            }
            #expect(file.relativePath == rest)
        }
    }

    @Test("the longest matching prefix of the app's whitelist wins")
    func longestPrefix() throws {
        let f = Fixture()
        try f.add("portal", version: "2.0", whitelist: ["https://h5.example.com/", "https://h5.example.com/mall/"],
                  files: ["index.html": "portal", "mall/index.html": "portal-mall", "inner.html": "inner"])
        let dir = f.store.versionDirectory("portal", Version("2.0")!)
        #expect(f.path("https://h5.example.com/mall/inner.html") == "\(dir)/inner.html")
        #expect(f.path("https://h5.example.com/index.html") == "\(dir)/index.html")
    }

    @Test("a version below the last known miniVersion is not used")
    func miniVersion() throws {
        let f = Fixture()
        try f.add("mall", version: "1.0", whitelist: ["https://h5.example.com/mall/"], miniVersion: "1.0")
        #expect(f.path("https://h5.example.com/mall/index.html") != nil)
        var check = f.store.checkState("mall")
        check.knownMiniVersion = Version("1.5")
        try f.store.saveCheckState(check, for: "mall")
        #expect(f.resolve("https://h5.example.com/mall/index.html") == .network(.belowMiniVersion, app: "mall"))
    }

    @Test("rollout admits exactly the devices whose bucket is within it")
    func rollout() throws {
        let f = Fixture()
        try f.add("mall", version: "1.0", whitelist: ["https://h5.example.com/mall/"], rollout: 30)
        for index in 0..<200 {
            let device = "device-\(index)"
            let inside = Resolver.rolloutBucket(deviceID: device, app: "mall") <= 30
            let result = f.resolve("https://h5.example.com/mall/index.html", device: device)
            #expect(inside ? result != .network(.outsideRollout, app: "mall") : result == .network(.outsideRollout, app: "mall"))
        }
        let zero = Fixture()
        try zero.add("mall", version: "1.0", whitelist: ["https://h5.example.com/mall/"], rollout: 0)
        #expect((0..<100).allSatisfy { zero.resolve("https://h5.example.com/mall/", device: "d\($0)") == .network(.outsideRollout, app: "mall") })
    }

    @Test("the device id is created once and stays stable")
    func deviceID() throws {
        let dir = TemporaryDirectory("device")
        let first = try DeviceID.load(root: dir.path)
        #expect(!first.isEmpty)
        #expect(try DeviceID.load(root: dir.path) == first)
    }

    @Test("a record that disagrees with the disk is not trusted")
    func inconsistentState() throws {
        let f = Fixture()
        try f.add("mall", version: "1.0", whitelist: ["https://h5.example.com/mall/"])
        try FileManager.default.removeItem(atPath: f.store.versionDirectory("mall", Version("1.0")!))
        #expect(f.store.active("mall") == nil)
        #expect(f.store.isInconsistent("mall"))
        #expect(f.resolve("https://h5.example.com/mall/index.html") == .network(.notWhitelisted, app: nil))
    }
}

@Suite("Versions and manifests")
struct VersionTests {
    @Test("versions compare numerically, missing parts as 0")
    func compare() {
        #expect(Version("1.4")! == Version("1.4.0")!)
        #expect(Version("1.4")! < Version("1.10")!)
        #expect(Version("2.10.3.1")! > Version("2.10.3")!)
        #expect(Version("1.4.0")!.description == "1.4.0")
    }

    @Test("invalid versions are refused", arguments: ["", "1.", ".1", "1..2", "a", "1.a", "-1", "+1", " 1", "1 ", "1.2.3.4.5.6.7.8.9", "1000000000", "1.2-beta"])
    func invalid(_ text: String) {
        #expect(Version(text) == nil)
    }

    @Test("RFC 3339 times round-trip; offsets and fractions parse; impossible dates do not")
    func times() {
        let date = RFC3339.date(from: "2026-12-31T23:59:58Z")
        #expect(date?.timeIntervalSince1970 == 1_798_761_598)
        #expect(date.map(RFC3339.string(from:)) == "2026-12-31T23:59:58Z")
        #expect(RFC3339.date(from: "2026-12-31T23:59:58.250Z")?.timeIntervalSince1970 == 1_798_761_598.25)
        #expect(RFC3339.date(from: "2027-01-01T01:59:58+02:00") == date)
        #expect(RFC3339.date(from: "2026-02-31T00:00:00Z") == nil)
        #expect(RFC3339.date(from: "2026-12-31 23:59:58") == nil)
        #expect(RFC3339.date(from: "tomorrow") == nil)
    }

    /// Read by hand, never by ICU: a long fraction made ICU end the process with SIGFPE.
    @Test("RFC 3339: fractions up to 9 digits, offsets to ±23:59, nothing else", arguments: [
        ("2026-12-31T23:59:58.123456789Z", 1_798_761_598.123456789),
        ("2026-12-31T23:59:58z", 1_798_761_598),
        ("2027-01-01T00:29:58+00:30", 1_798_761_598),
        ("2026-12-31T23:29:58-00:30", 1_798_761_598),
        ("7340-01-15T08:30:00.2500000000000000000000Z", nil),
        ("2026-12-31T23:59:58.Z", nil),
        ("2026-12-31T23:59:58+24:00", nil),
        ("2026-12-31T23:59:58+02", nil),
        ("2026-12-31T23:59:58+02:00Z", nil),
        ("2026-12-31T23:59:58", nil),
        ("2026-13-01T00:00:00Z", nil),
        ("+026-12-31T23:59:58Z", nil),
    ] as [(String, Double?)])
    func strictTimes(_ text: String, _ seconds: Double?) {
        let date = RFC3339.date(from: text)
        if let seconds {
            #expect(abs((date?.timeIntervalSince1970 ?? 0) - seconds) < 1e-6, "\(text)")
        } else {
            #expect(date == nil, "\(text)")
        }
    }

    @Test("HTTP dates round-trip and only IMF-fixdates parse")
    func httpDates() {
        #expect(HTTPDate.string(secondsSince1970: 784_111_777) == "Sun, 06 Nov 1994 08:49:37 GMT")
        #expect(HTTPDate.parse("Sun, 06 Nov 1994 08:49:37 GMT") == 784_111_777)
        #expect(HTTPDate.parse("Sunday, 06-Nov-94 08:49:37 GMT") == nil)
        #expect(HTTPDate.parse("3600") == nil)
    }

    @Test("app names follow the protocol pattern")
    func appNames() {
        #expect(AppName.isValid("mall"))
        #expect(AppName.isValid("m.all_1-x"))
        #expect(!AppName.isValid("Mall"))
        #expect(!AppName.isValid("-mall"))
        #expect(!AppName.isValid(""))
        #expect(!AppName.isValid(String(repeating: "a", count: 65)))
        #expect(!AppName.isValid("../x"))
    }
}
