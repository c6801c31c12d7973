import NIOCore
import NIOEmbedded
import NIOHTTP1
import Testing
@testable import OfflineServe

/// `LocalRawRequest` frames only heads NIO's HTTP decoder frames the same way: the raw
/// responder answers requests the decoder never sees, so a head the two read differently
/// would be a request smuggled past the decoder.
@Suite("Raw request heads")
struct LocalRawRequestTests {
    static func parse(_ text: String, limits: LocalRawRequest.Limits = .init()) -> LocalRawRequest.Parse {
        parse(Array(text.utf8), limits: limits)
    }

    static func parse(_ bytes: [UInt8], limits: LocalRawRequest.Limits = .init()) -> LocalRawRequest.Parse {
        bytes.withUnsafeBytes { LocalRawRequest.parse($0, limits: limits) }
    }

    static func request(_ text: String) throws -> LocalRawRequest {
        guard case .request(let request) = parse(text) else { throw Failure(text: text) }
        return request
    }

    struct Failure: Error { let text: String }

    @Test("a plain GET: its length, path, Host and that it asks for the whole file")
    func plainGet() throws {
        let text = "GET /mall/js/app.js?v=3 HTTP/1.1\r\nHost:  127.0.0.1:8080\r\nAccept: */*\r\nConnection: Keep-Alive\r\n\r\n"
        let request = try Self.request(text + "GET /next")
        let bytes = Array(text.utf8)
        #expect(request.length == bytes.count && request.isGet && request.plain)
        #expect(String(decoding: bytes[request.path], as: UTF8.self) == "/mall/js/app.js")
        #expect(request.host.map { String(decoding: bytes[$0], as: UTF8.self) } == "127.0.0.1:8080")
        let head = try Self.request("HEAD / HTTP/1.1\r\nhOsT: x\r\n\r\n")
        #expect(!head.isGet && head.plain && head.host == 23..<24)
    }

    @Test("fields that select part of the file, or may close the connection, make it not plain; two Hosts name none")
    func notPlain() throws {
        for field in ["Range: bytes=0-1", "if-none-match: \"x\"", "If-Modified-Since: x", "IF-RANGE: x", "Expect: 100-continue",
                      "Connection: close", "Connection: keep-alive, Upgrade", "Connection:"] {
            #expect(try !Self.request("GET / HTTP/1.1\r\nHost: a\r\n\(field)\r\n\r\n").plain, "\(field)")
        }
        #expect(try Self.request("GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n").host == nil)
        #expect(try Self.request("GET / HTTP/1.1\r\n\r\n").host == nil)
        // NIO's decoder keeps the space: not a value to route by here.
        #expect(try Self.request("GET / HTTP/1.1\r\nHost: a \r\n\r\n").host == nil)
    }

    @Test("every prefix of a head is incomplete; past the limits it is not")
    func incomplete() {
        let text = Array("GET /a HTTP/1.1\r\nHost: a\r\nX-Long: \(String(repeating: "b", count: 100))\r\n\r\n".utf8)
        for count in 0..<text.count {
            #expect(Self.parse(Array(text[..<count])) == .incomplete, "\(count) bytes")
        }
        #expect(Self.parse(text, limits: .init(bytes: text.count - 1)) == .other)
        #expect(Self.parse(text, limits: .init(fields: 1)) == .other)
        if case .request = Self.parse(text, limits: .init(bytes: text.count, fields: 2)) {} else { Issue.record("at the limits") }
    }

    @Test("heads outside the strict grammar, or with a field that may give a body or change the protocol, are left to the decoder",
          arguments: [
            "POST / HTTP/1.1\r\nHost: a\r\n\r\n", "get / HTTP/1.1\r\n\r\n", "GET  / HTTP/1.1\r\n\r\n", "\r\nGET / HTTP/1.1\r\n\r\n",
            "GET / HTTP/1.0\r\n\r\n", "GET / HTTP/1.1 \r\n\r\n", "GET http://a/ HTTP/1.1\r\n\r\n", "GET * HTTP/1.1\r\n\r\n",
            "GET /a#b HTTP/1.1\r\n\r\n", "GET /\u{7F} HTTP/1.1\r\n\r\n", "GET /a HTTP/1.1\n\n", "GET /a HTTP/1.1\r\nHost: a\n\r\n",
            "GET /a HTTP/1.1\r\nHost: a\r\r\n\r\n", "GET /a HTTP/1.1\r\nHost : a\r\n\r\n", "GET /a HTTP/1.1\r\n Host: a\r\n\r\n",
            "GET /a HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n", "GET /a HTTP/1.1\r\n: a\r\n\r\n", "GET /a HTTP/1.1\r\nHo\u{0}st: a\r\n\r\n",
            "GET /a HTTP/1.1\r\nX: a\u{0}b\r\n\r\n", "GET /a HTTP/1.1\r\nX: a\u{7F}\r\n\r\n", "GET /a HTTP/1.1\r\nX: é\r\n\r\n",
            "GET /a HTTP/1.1\r\nContent-Length: 0\r\n\r\n", "GET /a HTTP/1.1\r\ncontent-length: 5\r\n\r\nhello",
            "GET /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "GET /a HTTP/1.1\r\nTRANSFER-ENCODING: x\r\n\r\n",
            "GET /a HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", "GET /a HTTP/1.1\r\n\r\r\n",
          ])
    func other(_ text: String) {
        #expect(Self.parse(text) == .other)
    }

    /// What NIO's decoder reads from `bytes`: the parts, or nil when it refuses them.
    static func decode(_ bytes: [UInt8]) -> [HTTPServerRequestPart]? {
        let channel = EmbeddedChannel(handler: ByteToMessageHandler(HTTPRequestDecoder()))
        defer { _ = try? channel.finish() }
        do {
            try channel.writeInbound(ByteBuffer(bytes: bytes))
            var parts: [HTTPServerRequestPart] = []
            while let part = try channel.readInbound(as: HTTPServerRequestPart.self) { parts.append(part) }
            return parts
        } catch {
            return nil
        }
    }

    /// A deterministic generator (SplitMix64), so a failure names its seed.
    struct Generator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    @Test("whatever it frames, NIO's decoder reads as one request without a body, with the same target and Host (mutated heads)")
    func sameFramingAsDecoder() throws {
        let seeds = [
            "GET /mall/js/app.js HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nAccept: */*\r\n\r\n",
            "GET /a?b=c HTTP/1.1\r\nhost: h5.example.com.localhost\r\nConnection: keep-alive\r\nUser-Agent: x y\r\n\r\n",
            "HEAD / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc",
            "GET /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        ].map { Array($0.utf8) }
        let alphabet = Array("\r\n\t :;,/?#%\"\\aAzZ09-_.".utf8) + [0, 1, 0x7F, 0x80, 0xFF]
        let fields = ["Content-Length: 1", "transfer-encoding: chunked", "Host: b", "Upgrade: h2c", "X: \t", "Range: bytes=0-"]
        var generator = Generator(state: 14)
        var framed = 0
        for round in 0..<20_000 {
            var bytes = seeds.randomElement(using: &generator)!
            for _ in 0..<Int.random(in: 1...3, using: &generator) {
                let at = Int.random(in: 0...bytes.count, using: &generator)
                switch Int.random(in: 0..<4, using: &generator) {
                case 0: bytes.insert(alphabet.randomElement(using: &generator)!, at: at)
                case 1: if at < bytes.count { bytes.remove(at: at) }
                case 2: if at < bytes.count { bytes[at] = alphabet.randomElement(using: &generator)! }
                default:
                    // A whole field line after the request line.
                    if let line = bytes.firstIndex(of: 10) {
                        bytes.insert(contentsOf: Array((fields.randomElement(using: &generator)! + "\r\n").utf8), at: line + 1)
                    }
                }
            }
            guard case .request(let request) = Self.parse(bytes) else { continue }
            framed += 1
            // Framed here: the decoder must read these bytes, then a next request right after them.
            let next = Array("GET /next HTTP/1.1\r\nHost: n\r\n\r\n".utf8)
            let parts = try #require(Self.decode(Array(bytes[..<request.length]) + next), "round \(round): the decoder refused \(bytes)")
            guard parts.count == 4, case .head(let head) = parts[0], case .end = parts[1], case .head(let second) = parts[2], case .end = parts[3]
            else {
                Issue.record("round \(round): \(bytes) decoded as \(parts)")
                continue
            }
            #expect(second.uri == "/next", "round \(round)")
            #expect(head.version == .http1_1 && head.method == (request.isGet ? .GET : .HEAD), "round \(round)")
            #expect(head.uri.prefix { $0 != "?" } == String(decoding: bytes[request.path], as: UTF8.self), "round \(round)")
            // A Host named here is the one the decoder reads, as it reads it (none named: not answered here).
            if let host = request.host {
                #expect(head.headers["host"] == [String(decoding: bytes[host], as: UTF8.self)], "round \(round)")
            }
        }
        #expect(framed > 1000, "too few mutations were framed to say much")
    }
}
