import Foundation
import Testing
@testable import OfflineAgent
import TestSupport

/// RFC 6265 parsing, matching and storage, with an explicit clock.
@Suite("Cookies")
struct CookieTests {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)  // 2027-01-15T08:00:00Z
    static let page = URL(string: "http://shop.example.com/offline/mall/manifest.json")!

    static func parse(_ header: String, from url: URL = page) -> Cookie? {
        SetCookie.parse(header, from: url, now: now)
    }

    @Test("Set-Cookie attributes are read as RFC 6265 §5.2 says")
    func attributes() throws {
        let cookie = try #require(Self.parse(
            " sid = a b ; Path=/offline ; Domain=.Example.COM; HttpOnly; SameSite=lax; Max-Age=60; Expires=Wed, 09 Jun 2021 10:18:14 GMT; x=y"))
        #expect(cookie.name == "sid")
        #expect(cookie.value == "a b")
        #expect(cookie.domain == "example.com")
        #expect(!cookie.hostOnly)
        #expect(cookie.path == "/offline")
        #expect(cookie.httpOnly)
        #expect(!cookie.secure)
        #expect(cookie.sameSite == .lax)
        // Max-Age wins over Expires, wherever it stands.
        #expect(cookie.expires == Self.now.addingTimeInterval(60))

        let plain = try #require(Self.parse("a=1"))
        #expect(plain.domain == "shop.example.com")
        #expect(plain.hostOnly)
        #expect(plain.path == "/offline/mall")  // the default path: the request's directory
        #expect(plain.expires == nil)
        #expect(!plain.isPersistent)

        // The last occurrence of an attribute counts; an invalid one is ignored, not fatal.
        #expect(Self.parse("a=1; Path=/x; Path=/y")?.path == "/y")
        #expect(Self.parse("a=1; Path=relative")?.path == "/offline/mall")
        #expect(Self.parse("a=1; Max-Age=1e3")?.expires == nil)
        #expect(Self.parse("a=1; Expires=not a date")?.expires == nil)
        #expect(Self.parse("a=1; SameSite=sometimes")?.sameSite == nil)
        #expect(Self.parse("a=1; Max-Age=0")?.isExpired(at: Self.now) == true)
        #expect(Self.parse("a=1; Max-Age=-5")?.isExpired(at: Self.now) == true)
        // A server cannot keep a cookie for more than 400 days (RFC 6265bis).
        #expect(Self.parse("a=1; Max-Age=999999999")?.expires == Self.now.addingTimeInterval(400 * 86_400))
        #expect(Self.parse("a=")?.value == "")
        // A `;` that a prepended mark (U+0600) joins still ends the attribute, as in browsers.
        #expect(Self.parse("a=1; x=\u{600}; HttpOnly")?.httpOnly == true)
    }

    @Test("headers that set no cookie", arguments: [
        "no-equals-sign",
        "=value",
        " =value",
        "a=b\u{01}c",
        "a\u{7F}=b",
        "a=1; Domain=other.example",  // not the request's domain
        "a=1; Domain=le.com",  // partial label of example.com
        "a=1; Domain=com",  // a whole top-level domain
        "a=1; Secure",  // only https may set Secure cookies
        "a=" + String(repeating: "x", count: 4096),
    ])
    func refused(_ header: String) {
        #expect(Self.parse(header) == nil)
    }

    @Test("Domain may name the host or a parent; an address only itself")
    func domains() {
        #expect(Self.parse("a=1; Domain=shop.example.com")?.hostOnly == false)
        #expect(Self.parse("a=1; Domain=example.com")?.domain == "example.com")
        let local = URL(string: "http://127.0.0.1:8080/m")!
        #expect(Self.parse("a=1", from: local)?.domain == "127.0.0.1")
        #expect(Self.parse("a=1; Domain=0.0.1", from: local) == nil)
        #expect(Self.parse("a=1; Domain=localhost", from: URL(string: "http://localhost/")!)?.domain == "localhost")
        #expect(Self.parse("a=1; Secure", from: URL(string: "https://shop.example.com/")!)?.secure == true)
    }

    @Test("no cookie for a whole public suffix (the system's Public Suffix List)")
    func publicSuffixes() throws {
        // scripts/install-deps.sh installs it; without it only single labels would count.
        #expect(FileManager.default.fileExists(atPath: PublicSuffixList.systemPath), "apt-get install publicsuffix")
        let uk = URL(string: "https://shop.example.co.uk/m")!
        #expect(Self.parse("a=1; Domain=co.uk", from: uk) == nil)
        #expect(Self.parse("a=1; Domain=example.co.uk", from: uk)?.hostOnly == false)
        let pages = URL(string: "https://alice.github.io/app/")!
        #expect(Self.parse("a=1; Domain=github.io", from: pages) == nil)
        #expect(Self.parse("a=1; Domain=alice.github.io", from: pages)?.domain == "alice.github.io")

        let list = PublicSuffixList(text: """
            // comment
            com
            co.uk   trailing words are ignored
            *.ck
            !www.ck
            """)
        for suffix in ["com", "co.uk", "uk", "ck", "anything.ck", "localhost"] { #expect(list.isPublicSuffix(suffix), "\(suffix)") }
        for name in ["example.com", "example.co.uk", "www.ck", "a.anything.ck"] { #expect(!list.isPublicSuffix(name), "\(name)") }
        #expect(SetCookie.parse("a=1; Domain=www.ck", from: URL(string: "http://www.ck/")!, now: Self.now, suffixes: list)?.hostOnly == false)
        #expect(SetCookie.parse("a=1; Domain=x.ck", from: URL(string: "http://shop.x.ck/")!, now: Self.now, suffixes: list) == nil)
    }

    @Test("cookie dates in every format servers send", arguments: [
        ("Sun, 06 Nov 1994 08:49:37 GMT", 784_111_777.0),
        ("Sunday, 06-Nov-94 08:49:37 GMT", 784_111_777.0),
        ("Sun Nov  6 08:49:37 1994", 784_111_777.0),
        ("06 nov 1994 08:49:37", 784_111_777.0),
        ("Thu, 01 Jan 1970 00:00:00 GMT", 0.0),
        ("Fri, 31 Dec 2049 23:59:59 GMT", 2_524_607_999.0),
        ("Tue, 29 Feb 2028 00:00:00 GMT", 1_835_395_200.0),
        ("Mon, 01-Jan-30 00:00:00 GMT", 1_893_456_000.0),  // two-digit years below 70 are 20xx
    ])
    func dates(_ text: String, _ seconds: Double) {
        #expect(CookieDate.parse(text) == Date(timeIntervalSince1970: seconds))
    }

    @Test("dates that are not dates", arguments: [
        "", "Sun, 30 Feb 2027 00:00:00 GMT", "Sun, 06 Nov 1600 08:49:37 GMT", "Sun, 06 Nov 1994 24:00:00 GMT",
        "Sun, 06 Nov 1994 08:60:00 GMT", "Sun, 32 Nov 1994 08:49:37 GMT", "Sun, 06 Nox 1994 08:49:37 GMT", "06 Nov 1994",
        "Sun, 06 Nov 1994 8:49 GMT",
    ])
    func badDates(_ text: String) {
        #expect(CookieDate.parse(text) == nil)
    }

    @Test("the Cookie header: domain, path and Secure matching, longest path first")
    func header() {
        let jar = CookieJar()
        let https = URL(string: "https://shop.example.com/offline/mall/x")!
        jar.store(setCookie: ["root=1; Path=/", "deep=2; Path=/offline/mall", "mid=3; Path=/offline"], from: Self.page, now: Self.now)
        jar.store(setCookie: ["wide=4; Domain=example.com; Path=/", "sec=5; Secure; Path=/"], from: https, now: Self.now)
        #expect(jar.header(for: URL(string: "http://shop.example.com/offline/mall/a.zip")!, now: Self.now)
            == "deep=2; mid=3; root=1; wide=4")
        #expect(jar.header(for: URL(string: "https://shop.example.com/offline/mall/a.zip")!, now: Self.now)
            == "deep=2; mid=3; root=1; wide=4; sec=5")
        // Path-match is by segment: /offline/mallx is not under /offline/mall.
        #expect(jar.header(for: URL(string: "http://shop.example.com/offline/mallx")!, now: Self.now) == "mid=3; root=1; wide=4")
        // Host-only cookies stay on their host; Domain cookies reach siblings, never look-alikes.
        #expect(jar.header(for: URL(string: "http://cdn.example.com/offline/mall/")!, now: Self.now) == "wide=4")
        #expect(jar.header(for: URL(string: "http://badexample.com/")!, now: Self.now) == nil)
        #expect(jar.header(for: URL(string: "http://SHOP.example.com./")!, now: Self.now) == "root=1; wide=4")
    }

    @Test("expiry: an expired cookie is neither sent nor saved, and a past date deletes")
    func expiry() throws {
        let dir = TemporaryDirectory("jar")
        let jar = CookieJar(file: dir.file("cookies.json"))
        let url = URL(string: "http://127.0.0.1:9/manifest")!
        #expect(jar.store(setCookie: ["short=1; Max-Age=60", "long=2; Max-Age=3600", "session=3"], from: url, now: Self.now))
        #expect(jar.header(for: url, now: Self.now) == "short=1; long=2; session=3")
        let later = Self.now.addingTimeInterval(61)
        #expect(jar.header(for: url, now: later) == "long=2; session=3")
        try jar.save(now: later)
        let saved = try String(contentsOfFile: dir.file("cookies.json"), encoding: .utf8)
        #expect(saved.contains("\"long\""))
        #expect(!saved.contains("\"short\""))
        #expect(!saved.contains("\"session\""))

        // A server deletes a cookie by sending it with a date in the past.
        #expect(jar.store(setCookie: ["long=; Expires=Thu, 01 Jan 1970 00:00:00 GMT"], from: url, now: Self.now))
        #expect(jar.header(for: url, now: Self.now) == "short=1; session=3")
    }

    @Test("what a jar saves reads back; a file that is not a jar is refused whole")
    func jarFile() throws {
        let dir = TemporaryDirectory("jar-file")
        let profile = try CookieProfile(root: dir.path, name: "p")
        let jar = CookieJar(file: profile.file)
        // A tab is allowed inside a value (RFC 6265bis); the file must take it back.
        jar.store(setCookie: ["tab=a\tb; Max-Age=60; Path=/x"], from: URL(string: "http://127.0.0.1/x/y")!, now: Self.now)
        try jar.save(now: Self.now)
        #expect(try profile.read(now: Self.now).map(\.value) == ["a\tb"])

        let good = try String(contentsOfFile: profile.file, encoding: .utf8)
        for (broken, reason) in [
            (good.replacingOccurrences(of: "\"format\" : 1", with: "\"format\" : 2"), "unknown cookie jar format 2"),
            (good.replacingOccurrences(of: "\"path\" : \"\\/x\"", with: "\"path\" : \"x\""), "malformed cookie"),
            (good.replacingOccurrences(of: "a\\tb", with: "a;b"), "malformed cookie"),
        ] {
            #expect(broken != good)
            try Data(broken.utf8).write(to: URL(fileURLWithPath: profile.file))
            #expect {
                try profile.read(now: Self.now)
            } throws: { error in
                (error as? OfflineAgentError)?.reason.contains(reason) == true
            }
        }
    }

    @Test("a replaced cookie keeps its place; the per-domain cap drops the oldest")
    func replacement() {
        let jar = CookieJar()
        let url = URL(string: "http://127.0.0.1/")!
        jar.store(setCookie: ["a=1", "b=2"], from: url, now: Self.now)
        #expect(!jar.store(setCookie: ["a=3"], from: url, now: Self.now.addingTimeInterval(5)))  // session cookies: nothing to save
        #expect(jar.header(for: url, now: Self.now) == "a=3; b=2")
        for i in 0..<CookieJar.maxCookiesPerDomain { jar.store(setCookie: ["n\(i)=\(i)"], from: url, now: Self.now) }
        let names = jar.all(now: Self.now).map(\.name)
        #expect(names.count == CookieJar.maxCookiesPerDomain)
        #expect(!names.contains("a") && !names.contains("b"))
        #expect(names.last == "n\(CookieJar.maxCookiesPerDomain - 1)")

        // Over all domains, the oldest cookies go first too.
        let full = (0..<CookieJar.maxCookies).map { Cookie(name: "c", value: "\($0)", domain: "h\($0).example", created: Self.now) }
        let wide = CookieJar(cookies: full)
        wide.store(setCookie: ["c=new"], from: URL(string: "http://new.example/")!, now: Self.now)
        let all = wide.all(now: Self.now)
        #expect(all.count == CookieJar.maxCookies)
        #expect(all.first?.domain == "h1.example")
        #expect(all.last?.domain == "new.example")
    }

    @Test("profile names")
    func profileNames() {
        for name in ["default", "alice", "User-1", "a.b_c"] { #expect(CookieProfile.isValid(name), "\(name)") }
        for name in ["", ".hidden", "-x", "a/b", "..", "a b", String(repeating: "x", count: 65), "ä"] {
            #expect(!CookieProfile.isValid(name), "\(name)")
        }
    }
}
