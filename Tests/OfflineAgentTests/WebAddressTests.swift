import AsyncHTTPClient
import Foundation
import Testing
@testable import OfflineAgent
import TestSupport

/// The one place that says what a web address is: schemes, IPv6 brackets, ports.
@Suite("Web addresses")
struct WebAddressTests {
    struct Split: Sendable, CustomTestStringConvertible {
        var authority: String
        var host: String?
        var port: Int?
        var testDescription: String { "'\(authority)'" }
    }

    static let splits: [Split] = [
        .init(authority: "example.com", host: "example.com", port: nil),
        .init(authority: "example.com:8080", host: "example.com", port: 8080),
        .init(authority: "[::1]", host: "::1", port: nil),
        .init(authority: "[::1]:8421", host: "::1", port: 8421),
        .init(authority: "[fe80::1%25eth0]:1", host: "fe80::1%25eth0", port: 1),
        // Malformed: IPv6 without brackets, brackets around IPv4, empty or oversized ports,
        // an empty host, text after the closing bracket, a missing bracket.
        .init(authority: "::1", host: nil, port: nil),
        .init(authority: "::1:8421", host: nil, port: nil),
        .init(authority: "[127.0.0.1]:80", host: nil, port: nil),
        .init(authority: "[::1]:", host: nil, port: nil),
        .init(authority: "host:", host: nil, port: nil),
        .init(authority: "host:123456", host: nil, port: nil),
        .init(authority: "host:+80", host: nil, port: nil),
        .init(authority: ":80", host: nil, port: nil),
        .init(authority: "", host: nil, port: nil),
        .init(authority: "[::1]x", host: nil, port: nil),
        .init(authority: "[::1", host: nil, port: nil),
    ]

    @Test("authorities split into host and port; malformed ones are refused", arguments: splits)
    func split(_ c: Split) {
        let parsed = WebAddress.split(authority: c.authority)
        #expect(parsed.map { String($0.host) } == c.host)
        if c.host != nil { #expect(parsed?.port == c.port) }
    }

    @Test("IPv6 hosts are bracketed once in URLs and authorities")
    func brackets() {
        #expect(WebAddress.bracketed("::1") == "[::1]")
        #expect(WebAddress.bracketed("[::1]") == "[::1]")
        #expect(WebAddress.bracketed("127.0.0.1") == "127.0.0.1")
        #expect(WebAddress.unbracketed("[::1]") == "::1")
        #expect(WebAddress.unbracketed("::1") == "::1")
        #expect(WebAddress.unbracketed("[") == "[")
        #expect(WebAddress.authority(host: "::1", port: 8421) == "[::1]:8421")
        #expect(WebAddress.authority(host: "[::1]", port: 8421) == "[::1]:8421")
        #expect(WebAddress.authority(host: "localhost", port: 80) == "localhost:80")
        #expect(WebAddress.endpoint(of: URL(string: "http://[::1]:8421/m")!) == "[::1]:8421")
        #expect(WebAddress.endpoint(of: URL(string: "https://cdn.example.com/p.zip")!) == "cdn.example.com:443")
        #expect(WebAddress.endpoint(of: URL(string: "HTTP://cdn.example.com/p.zip")!) == "cdn.example.com:80")
    }

    @Test("only absolute http and https URLs with a host are web addresses")
    func schemes() {
        for good in ["http://a/", "HTTPS://a.example/x?y#z", "http://[::1]:80/", "https://127.0.0.1"] {
            #expect(WebAddress.isAbsolute(good), "\(good)")
            #expect(WebAddress.isAbsolute(URL(string: good)!), "\(good)")
        }
        for bad in ["ftp://a/", "file:///etc/passwd", "javascript:alert(1)", "/relative", "http://", "http:///x", "data:,x", ""] {
            #expect(!WebAddress.isAbsolute(bad), "\(bad)")
            if let url = URL(string: bad) { #expect(!WebAddress.isAbsolute(url), "\(bad)") }
        }
        #expect(WebAddress.webScheme("HTTPS") == "https")
        #expect(WebAddress.webScheme("ws") == nil)
        #expect(WebAddress.webScheme(nil) == nil)
        #expect(WebAddress.defaultPort(scheme: "https") == 443)
        #expect(WebAddress.defaultPort(scheme: "http") == 80)
    }

    @Test("a transport error names an IPv6 server as [host]:port")
    func ipv6Endpoint() {
        let error = HTTPFetcher.failure(HTTPClientError.connectTimeout, phase: .manifest, url: URL(string: "http://[::1]:8421/m.json")!)
        #expect(error.reason.contains("[::1]:8421"), "\(error.reason)")
    }

    @Test("a redirect to another scheme is a protocol violation; the installed version stays")
    func redirectToOtherScheme() async throws {
        let h = try SyncHarness()
        h.origin.setManifest(h.full("1.0.0"))
        #expect(await h.sync().result == .updated)
        let installed = h.active
        let server = try ScriptedServer { _ in .status(302, headers: [("Location", "ftp://127.0.0.1/pkg.zip")]) }
        h.origin.setManifest(h.full("1.1.0", ["url": "\(server.baseURL)/start"]))
        let report = await h.sync()
        #expect(report.result == .failed)
        #expect(report.error?.cause == .protocolViolation, "\(report.error?.description ?? "")")
        #expect(report.error?.reason.contains("ftp") == true)
        #expect(h.active == installed)
    }
}
