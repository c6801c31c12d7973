import FoundationEssentials
import OfflineAgent
import Testing

@Suite("Mirror origins")
struct MirrorOriginTests {
    @Test(arguments: [
        ("https://h5.example.com/a/b?x=1", "h5.example.com.localhost"),
        ("https://H5.Example.COM.:443/", "h5.example.com.localhost"),
        ("http://h5.example.com/", "h5.example.com.http-80.localhost"),
        ("https://h5.example.com:8443/", "h5.example.com.https-8443.localhost"),
        ("http://127.0.0.1:8080/x", "127.0.0.1.http-8080.localhost"),
        ("http://app.localhost:3000/", "app.localhost.http-3000.localhost"),
        ("https://localhost/", "localhost.localhost"),
    ])
    func mapsAndReverses(url: String, mirror: String) throws {
        let origin = try #require(MirrorOrigin(url: URL(string: url)!))
        #expect(origin.mirrorHost == mirror)
        #expect(MirrorOrigin(mirrorHost: mirror) == origin)
        #expect(MirrorOrigin(mirrorHost: mirror.uppercased() + ".") == origin)
    }

    @Test(arguments: [
        "localhost", "127.0.0.1", "example.com", ".localhost", "a..b.localhost",
        "h5.example.com.https-443.localhost",  // non-canonical https:443
        "h5.example.com.http-080.localhost", "h5.example.com.http-0.localhost", "h5.example.com.http-65536.localhost",
        "http-80.localhost", "h5.example.com.ftp-21.localhost.evil", "h5.ex%61mple.com.localhost", "\u{e9}.localhost",
    ])
    func refusesNonCanonicalNames(name: String) {
        #expect(MirrorOrigin(mirrorHost: name) == nil)
    }

    @Test(arguments: [
        "ftp://example.com/", "https://[::1]/", "https://x.http-80/", "https://x.http-080/", "https://x.https-x/",
        "https://" + String(repeating: "a", count: 64) + ".example/",
        "https://" + Array(repeating: String(repeating: "a", count: 50), count: 5).joined(separator: ".") + "/",
    ])
    func refusesUnmirrorableOrigins(url: String) {
        #expect(URL(string: url).flatMap(MirrorOrigin.init(url:)) == nil)
    }

    @Test func distinctOriginsGetDistinctHosts() {
        let urls = ["https://a.example", "http://a.example", "https://a.example:8443", "http://a.example:443", "https://b.a.example", "http://a.example:8443"]
        let hosts = Set(urls.compactMap { MirrorOrigin(url: URL(string: $0)!)?.mirrorHost })
        #expect(hosts.count == urls.count)
    }

    @Test func mirrorURLKeepsPathQueryAndFragment() throws {
        let origin = try #require(MirrorOrigin(url: URL(string: "https://h5.example.com")!))
        #expect(origin.mirrorURL(for: URL(string: "https://h5.example.com/shop/a%20b?q=1&r=%2F#top")!, servePort: 8421)
            == "http://h5.example.com.localhost:8421/shop/a%20b?q=1&r=%2F#top")
        #expect(origin.mirrorURL(for: URL(string: "https://h5.example.com")!, servePort: 1) == "http://h5.example.com.localhost:1/")
        #expect(origin.mirrorURL(for: URL(string: "http://h5.example.com/")!, servePort: 1) == nil)
        #expect(origin.origin == "https://h5.example.com")
        #expect(MirrorOrigin(url: URL(string: "http://h:8080")!)?.origin == "http://h:8080")
    }
}
