import Foundation
#if canImport(Glibc)
import Glibc
#endif
import OfflineAgent
@testable import OfflineServe
import Testing
import TestSupport

/// An upload on a mirror host whose body breaks off (cut by the page, or framed wrongly)
/// never reaches the origin as a complete request (`docs/PROTOCOL.md`, "Forwarding"): the
/// origin connection is aborted without the end of the body, and the page gets `400` and
/// the close. Sent as an attacker would, byte for byte on a raw socket, to a raw origin
/// that records what it received and answers only a request it got whole.
@Suite("Broken uploads on a mirror host")
struct BrokenUploadTests {
    typealias H = ProxyHarness

    struct Case: Sendable, CustomTestStringConvertible {
        let name: String
        /// Framing headers of the request, each ending with CRLF.
        let framing: String
        /// What follows the head, sent once the origin has the head.
        let body: String
        /// The page ends its side after `body` (it still reads the answer).
        let halfClose: Bool
        var testDescription: String { name }
    }

    static let chunked = "Transfer-Encoding: chunked\r\n"

    static let cases: [Case] = [
        Case(name: "chunked, cut inside a chunk", framing: chunked, body: "5\r\nhello\r\n10\r\nabc", halfClose: true),
        Case(name: "chunked, cut between chunks", framing: chunked, body: "5\r\nhello\r\n", halfClose: true),
        Case(name: "chunked, cut after the last chunk, before the trailer's end", framing: chunked, body: "5\r\nhello\r\n0\r\n", halfClose: true),
        Case(name: "Content-Length, cut short", framing: "Content-Length: 100\r\n", body: String(repeating: "x", count: 40), halfClose: true),
        Case(name: "a chunk size that is not hex", framing: chunked, body: "5\r\nhello\r\nzz\r\nhello\r\n0\r\n\r\n", halfClose: false),
        Case(name: "a chunk size that overflows 64 bits", framing: chunked,
             body: "5\r\nhello\r\n10000000000000005\r\nhello\r\n0\r\n\r\n", halfClose: false),
        Case(name: "a chunk without its CRLF", framing: chunked, body: "5\r\nhelloXY0\r\n\r\n", halfClose: false),
        Case(name: "a malformed chunk extension", framing: chunked, body: "5\r\nhello\r\n5;a\"b\r\nhello\r\n0\r\n\r\n", halfClose: false),
        Case(name: "a malformed trailer field", framing: chunked, body: "5\r\nhello\r\n0\r\nBad Field: x\r\n\r\n", halfClose: false),
    ]

    @Test("a body that breaks off never reaches the origin whole; the page gets 400 and the close", arguments: cases)
    func brokenBody(_ broken: Case) async throws {
        let origin = try RecordingOrigin()
        defer { origin.stop() }
        let mirrored = MirrorOrigin(scheme: "http", host: "127.0.0.1", port: origin.port)!
        try await H.withFront(origins: [mirrored], via: .serve) { front in
            let head = "POST /upload HTTP/1.1\r\nHost: \(front.authority(mirrored))\r\n\(broken.framing)\r\n"
            let (answer, closed) = try await LocalHTTP.onThread { () -> (String, Bool) in
                let fd = try LoopbackSocket.connect(port: front.port, timeout: 60)
                defer { close(fd) }
                #expect(LoopbackSocket.sendAll(fd, Array(head.utf8)))
                // The forward is under way: the origin has the head before any byte of the body.
                #expect(origin.wait { $0.first.map { $0.bytes.firstRange(of: Array("\r\n\r\n".utf8)) != nil } ?? false })
                #expect(LoopbackSocket.sendAll(fd, Array(broken.body.utf8)))
                if broken.halfClose { shutdown(fd, Int32(SHUT_WR)) }
                return Self.readUntilClose(fd)
            }
            #expect(answer.hasPrefix("HTTP/1.1 400"), "\(answer.prefix(300))")
            #expect(answer.lowercased().contains("\r\nconnection: close\r\n"), "\(answer.prefix(300))")
            #expect(closed, "the server closes after the 400")
            // The origin connection ends without the request's end: never whole, never answered.
            #expect(try await LocalHTTP.onThread { origin.wait { !$0.isEmpty && $0.allSatisfy(\.closed) } }, "the origin connection was left open")
            let recorded = origin.recorded
            #expect(recorded.count == 1)
            for connection in recorded {
                #expect(!connection.complete && !RecordingOrigin.isWhole(connection.bytes), "\(connection.text)")
                #expect(connection.text.hasPrefix("POST /upload HTTP/1.1\r\n"), "\(connection.text.prefix(200))")
            }
        }
    }

    @Test("after a broken upload the server goes on: the next upload on a new connection reaches the origin whole")
    func serverGoesOn() async throws {
        let origin = try RecordingOrigin()
        defer { origin.stop() }
        let mirrored = MirrorOrigin(scheme: "http", host: "127.0.0.1", port: origin.port)!
        try await H.withFront(origins: [mirrored], via: .serve) { front in
            let host = front.authority(mirrored)
            let broken = "POST /upload HTTP/1.1\r\nHost: \(host)\r\n\(Self.chunked)\r\n5\r\nhello\r\nzz\r\n"
            let whole = "POST /upload HTTP/1.1\r\nHost: \(host)\r\n\(Self.chunked)Connection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
            let first = try await LocalHTTP.onThread { () -> String in
                let fd = try LoopbackSocket.connect(port: front.port, timeout: 60)
                defer { close(fd) }
                _ = LoopbackSocket.sendAll(fd, Array(broken.utf8))
                return Self.readUntilClose(fd).text
            }
            #expect(first.hasPrefix("HTTP/1.1 400"), "\(first.prefix(300))")
            let second = try await LocalHTTP.onThread { () -> String in
                let fd = try LoopbackSocket.connect(port: front.port, timeout: 60)
                defer { close(fd) }
                _ = LoopbackSocket.sendAll(fd, Array(whole.utf8))
                return Self.readUntilClose(fd).text
            }
            #expect(second.hasPrefix("HTTP/1.1 200") && second.hasSuffix("complete"), "\(second.prefix(300))")
            #expect(origin.recorded.filter(\.complete).count == 1)
        }
    }

    /// Everything the server sends until it closes (bounded by the socket's timeout), and
    /// whether it closed rather than the receive timing out.
    static func readUntilClose(_ fd: Int32) -> (text: String, closed: Bool) {
        var received: [UInt8] = [], chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = recv(fd, &chunk, chunk.count, 0)
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return (String(decoding: received, as: UTF8.self), n == 0) }
            received += chunk[..<n]
        }
    }
}
