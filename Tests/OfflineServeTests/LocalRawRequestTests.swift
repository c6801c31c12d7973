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
        #expect(request.length == bytes.count && request.headLength == bytes.count && request.isGet && request.plain && request.keepsAlive)
        #expect(String(decoding: bytes[request.target], as: UTF8.self) == "/mall/js/app.js?v=3")
        #expect(String(decoding: bytes[request.path], as: UTF8.self) == "/mall/js/app.js")
        #expect(request.host.map { String(decoding: bytes[$0], as: UTF8.self) } == "127.0.0.1:8080")
        let head = try Self.request("HEAD / HTTP/1.1\r\nhOsT: x\r\n\r\n")
        #expect(!head.isGet && head.plain && head.host == 23..<24)
    }

    @Test("fields that select part of the file, or may close the connection, make it not plain; two Hosts name none")
    func notPlain() throws {
        for field in ["Range: bytes=0-1", "if-none-match: \"x\"", "If-Modified-Since: x", "IF-RANGE: x", "Expect: 100-continue",
                      "Connection: close", "Connection: keep-alive, Upgrade", "Connection:", "Content-Length: 0"] {
            let request = try Self.request("GET / HTTP/1.1\r\nHost: a\r\n\(field)\r\n\r\n")
            #expect(!request.plain, "\(field)")
            // Only a `Connection` other than `keep-alive` makes it more than plain for a forward.
            #expect(request.keepsAlive == !field.hasPrefix("Connection"), "\(field)")
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

    @Test("a body framed by one Content-Length is part of the request once all of it was read; any method of a page's")
    func bodies() throws {
        let head = "POST /api/cart?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n"
        let request = try Self.request(head + "hello" + "GET /next")
        #expect(request.method == .post && request.hasLength && !request.plain && request.keepsAlive)
        #expect(request.headLength == head.utf8.count && request.length == head.utf8.count + 5 && request.body.count == 5)
        for count in head.utf8.count..<(head.utf8.count + 5) {
            #expect(Self.parse(Array(Array((head + "hello").utf8)[..<count])) == .incomplete, "\(count) bytes")
        }
        for method in LocalRawRequest.Method.allCases {
            let request = try Self.request("\(method.rawValue) /a HTTP/1.1\r\nHost: a\r\ncontent-length: 0\r\n\r\n")
            #expect(request.method == method && request.body.isEmpty && request.hasLength)
        }
        #expect(try !Self.request("DELETE /a HTTP/1.1\r\nHost: a\r\n\r\n").hasLength)
        // Past the body limit: the decoder's.
        #expect(Self.parse(head + "hello", limits: .init(body: 4)) == .other)
    }

    @Test("heads outside the strict grammar, or with a field that may change the framing or the protocol, are left to the decoder",
          arguments: [
            "CONNECT a:1 HTTP/1.1\r\nHost: a\r\n\r\n", "TRACE / HTTP/1.1\r\n\r\n", "PROPFIND / HTTP/1.1\r\n\r\n",
            "POSTS / HTTP/1.1\r\n\r\n", "OPTIONSX / HTTP/1.1\r\n\r\n", "get / HTTP/1.1\r\n\r\n", "GET  / HTTP/1.1\r\n\r\n", "\r\nGET / HTTP/1.1\r\n\r\n",
            "GET / HTTP/1.0\r\n\r\n", "GET / HTTP/1.1 \r\n\r\n", "GET http://a/ HTTP/1.1\r\n\r\n", "GET * HTTP/1.1\r\n\r\n",
            "GET /a#b HTTP/1.1\r\n\r\n", "GET /\u{7F} HTTP/1.1\r\n\r\n", "GET /a HTTP/1.1\n\n", "GET /a HTTP/1.1\r\nHost: a\n\r\n",
            "GET /a HTTP/1.1\r\nHost: a\r\r\n\r\n", "GET /a HTTP/1.1\r\nHost : a\r\n\r\n", "GET /a HTTP/1.1\r\n Host: a\r\n\r\n",
            "GET /a HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n", "GET /a HTTP/1.1\r\n: a\r\n\r\n", "GET /a HTTP/1.1\r\nHo\u{0}st: a\r\n\r\n",
            "GET /a HTTP/1.1\r\nX: a\u{0}b\r\n\r\n", "GET /a HTTP/1.1\r\nX: a\u{7F}\r\n\r\n", "GET /a HTTP/1.1\r\nX: é\r\n\r\n",
            "POST /a HTTP/1.1\r\nContent-Length: 05\r\n\r\nhello", "POST /a HTTP/1.1\r\nContent-Length: +5\r\n\r\nhello",
            "POST /a HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello", "POST /a HTTP/1.1\r\nContent-Length: 5 5\r\n\r\n",
            "POST /a HTTP/1.1\r\nContent-Length: -1\r\n\r\n", "POST /a HTTP/1.1\r\nContent-Length: 0x5\r\n\r\nhello",
            "POST /a HTTP/1.1\r\nContent-Length: 1234567890\r\n\r\n", "POST /a HTTP/1.1\r\nContent-Length:\r\n\r\n",
            "POST /a HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
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

    /// `value` without the spaces and tabs around it.
    static func trimmed(_ value: String) -> String {
        let blank: (Character) -> Bool = { $0 == " " || $0 == "\t" }
        return String(value.drop(while: blank).reversed().drop(while: blank).reversed())
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

    @Test("whatever it frames, NIO's decoder reads as one request, with the same method, target, Host and body (mutated requests)")
    func sameFramingAsDecoder() throws {
        let seeds = [
            "GET /mall/js/app.js HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nAccept: */*\r\n\r\n",
            "GET /a?b=c HTTP/1.1\r\nhost: h5.example.com.localhost\r\nConnection: keep-alive\r\nUser-Agent: x y\r\n\r\n",
            "HEAD / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc",
            "GET /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            "POST /api/cart HTTP/1.1\r\nHost: a.localhost:1\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"cart\":[1,2]}",
            "PUT /x HTTP/1.1\r\nContent-Length: 10\r\nHost: a\r\n\r\n0123456789GET",
            "DELETE /x?y HTTP/1.1\r\nHost: a\r\n\r\n", "OPTIONS /x HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
        ].map { Array($0.utf8) }
        let alphabet = Array("\r\n\t :;,/?#%\"\\aAzZ09-_.".utf8) + [0, 1, 0x7F, 0x80, 0xFF]
        let fields = [
            "Content-Length: 1", "content-length: 0", "Content-Length: 12", "transfer-encoding: chunked", "Host: b", "Upgrade: h2c", "X: \t",
            "Range: bytes=0-",
        ]
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
            // The head, the body in parts, the end; then the next request's head and end.
            guard parts.count >= 4, case .head(let head) = parts[0], case .end = parts[parts.count - 3],
                  case .head(let second) = parts[parts.count - 2], case .end = parts[parts.count - 1]
            else {
                Issue.record("round \(round): \(bytes) decoded as \(parts)")
                continue
            }
            var body: [UInt8] = []
            for part in parts[1..<(parts.count - 3)] {
                guard case .body(let bytes) = part else { Issue.record("round \(round): \(parts)"); break }
                body += Array(bytes.readableBytesView)
            }
            #expect(body == Array(bytes[request.body]), "round \(round)")
            #expect(second.uri == "/next", "round \(round)")
            #expect(head.version == .http1_1 && head.method.rawValue == request.method.rawValue, "round \(round)")
            #expect(head.uri == String(decoding: bytes[request.target], as: UTF8.self), "round \(round)")
            #expect(head.uri.prefix { $0 != "?" } == String(decoding: bytes[request.path], as: UTF8.self), "round \(round)")
            // A Host named here is the one the decoder reads, as it reads it (none named: not answered here).
            if let host = request.host {
                #expect(head.headers["host"] == [String(decoding: bytes[host], as: UTF8.self)], "round \(round)")
            }
            // The fields as `forEachField` gives them are the decoder's, in order, with their
            // values trimmed as HTTPTypes trims them for the decoded path.
            var fields: [(String, String)] = []
            bytes.withUnsafeBytes { raw in
                request.forEachField(in: raw) { fields.append((String(decoding: $0, as: UTF8.self), String(decoding: $1, as: UTF8.self))) }
            }
            #expect(fields.map(\.0) == head.headers.map(\.name) && fields.map(\.1) == head.headers.map { Self.trimmed($0.value) }, "round \(round)")
        }
        #expect(framed > 1000, "too few mutations were framed to say much")
    }
}
